"""User-facing errors. Each names the offending field or resource and what was expected,
so the CLI can print one line instead of a traceback from deep inside torch."""


class WorkbenchError(Exception):
    """Base class of every error the CLI reports without a traceback."""


class ConfigError(WorkbenchError):
    """A suite or component configuration is invalid."""


class DatasetNotFoundError(WorkbenchError):
    """A dataset is absent locally and could not be downloaded."""


class PartitionError(WorkbenchError):
    """A partition's constraints cannot be met for this dataset."""


class NotApplicableError(WorkbenchError):
    """An attack needs something the target does not release."""
