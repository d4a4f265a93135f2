"""The pipeline document (YAML → pydantic), the stage contract, gates and the runner."""
