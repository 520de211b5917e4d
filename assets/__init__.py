"""The Dagster code location of segos: thin asset wrappers over `segos_pipeline` (see `definitions.py`).

`workspace.yaml` in the project root loads `assets.definitions`; `dagster dev` there serves it.
"""

import warnings

# Outputs carry content-hash data versions on purpose; Dagster flags the parameter as beta on every
# materialization, which only buries the useful log lines.
warnings.filterwarnings("ignore", message=r"Parameter `data_version` of initializer `Output.__init__`")
# Dagster's own Pipes session code (1.13) calls its deprecated `context.run_id` and a preview API on every
# launch (`EngineSettings(launch="pipes")`); neither is ours to change.
warnings.filterwarnings("ignore", message=r"AssetExecutionContext\.run_id is deprecated")
warnings.filterwarnings("ignore", message=r"Function `PipesMessageReader\.expected_writer_count`")
