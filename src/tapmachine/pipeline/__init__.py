"""The workflow layer: command line, the stages the rules run, configuration, MLflow tracking."""
