"""MLflow tracking of the workflow's jobs, best effort: ``store`` (the tracking store, its
experiments and runs, the environment jobs read), ``records`` (``RunRecord``: one job's run as
data, written beside its output), ``recorder`` (logs a record live and writes it) and
``invocation`` (one parent run per experiment for a ``snakemake`` invocation, and its summary),
``environment`` (``TAPMACHINE_JOB``: the values the workflow hands every job) and
``mlflow_model`` (a machine as an MLflow model).
Nothing below the pipeline imports this package."""
