"""Training Boltzmann machines: settings, the loop, gradient methods, resume, pretraining."""
