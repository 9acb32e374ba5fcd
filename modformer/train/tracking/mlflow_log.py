"""MLflow: one MLflow run per modformer run, in the experiment named by the run's group (the
sweep), resumed with the run. The store is train.mlflow_uri, else $MLFLOW_TRACKING_URI, else a
local file store `mlruns` in the current folder (`mlflow ui --backend-store-uri mlruns`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mlflow.entities import Metric, Param
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from ...configtools import flatten
from ...files import atomic_write_text
from . import RunInfo, Tracker

ID_FILE = "mlflow_run_id"  # in the run folder: the MLflow run a resumed run continues


class MlflowTracker(Tracker):
    def __init__(self, info: RunInfo):
        super().__init__(info)
        uri = info.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3 keeps its file store but asks for this opt-in; a local store needs no server.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=uri)
        id_file = info.run_dir / ID_FILE
        if info.start_step and id_file.exists():
            self.run_id = id_file.read_text().strip()
        else:
            experiment_id = self._experiment(info.group)
            self.run_id = self.client.create_run(experiment_id, run_name=info.name).info.run_id
            atomic_write_text(id_file, self.run_id + "\n")
            params = {k: str(v)[:6000] for k, v in flatten(info.config).items()}  # MLflow's length limit
            items = list(params.items())
            for i in range(0, len(items), 100):  # at most 100 parameters a call
                self.client.log_batch(self.run_id, params=[Param(k, v) for k, v in items[i:i + 100]])

    def _experiment(self, name: str) -> str:
        """The id of experiment `name`, made if missing (by whichever worker of a sweep comes first)."""
        for _ in range(2):
            experiment = self.client.get_experiment_by_name(name)
            if experiment is not None:
                return experiment.experiment_id
            try:
                return self.client.create_experiment(name)
            except MlflowException:  # another run of the sweep made it meanwhile
                continue
        raise MlflowException(f"cannot create the MLflow experiment {name}")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        stamp = int(time.time() * 1000)
        metrics = [Metric(name, value, stamp, step) for name, value in scalars.items()]
        for i in range(0, len(metrics), 1000):  # MLflow's limit of metrics a call
            self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])

    def finish(self, images: list[Path]) -> None:
        for path in images:
            self.client.log_artifact(self.run_id, str(path), artifact_path="plots")
        self.client.set_terminated(self.run_id)


TRACKER = MlflowTracker
