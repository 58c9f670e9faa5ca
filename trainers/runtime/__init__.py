"""What every trainer stands on: user errors, progress bars, interrupts, reporting, plots, checkpoints, the run
folder, and the device/threads/dtype runtime. Imports nothing of the other trainer packages."""
