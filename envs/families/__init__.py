"""The task families of the command environments: python_debug (python_families), bash_exec (bash_families,
bash_tree), git_repo (git_families, git_script), and command_env, what bash and git share."""
