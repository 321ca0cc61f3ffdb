"""Training with the paper recipe (section 8.3): the Trainer, its callbacks, objectives and schedules."""
