"""The export worker: `python -m hfexport.worker`, one process per export that forks one per backend.

Only this process loads the model's weights and traces it (`__main__.py`), builds its inputs
(`inputs.py`) and validates the reloaded files (`validate.py`). The parent never imports these
modules: a crash, an OOM kill or a hang here costs one backend, never the run.
"""
