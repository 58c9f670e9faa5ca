"""The sandbox every command of an environment runs in (sandbox: the `Sandbox` class) and what it is made of:
isolation, system_view, processes, leftovers, tree_walk, cgroups, spawner, and programs/ (run as scripts)."""
