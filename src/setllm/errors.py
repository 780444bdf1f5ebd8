"""The user-error family. The CLI prints a :class:`SetLLMError` as one line ``error: ...``
and exits 2; anything else is a bug and keeps its traceback."""

from __future__ import annotations


class SetLLMError(Exception):
    """A user's mistake (bad input, flag, file or model); the message says what and where."""


class InputError(SetLLMError, ValueError):
    """A bad argument or value (also a ``ValueError``, for callers that catch those)."""


class DataError(InputError):
    """A data file or record is malformed; the message names file and line."""


class ModelLoadError(SetLLMError, OSError):
    """A model or adapter could not be found or loaded; the message says what to do."""


class SetLLMWarning(UserWarning):
    """Something the user should know (the CLI prints it once as ``warning: ...``)."""


class OptionError(InputError):
    """A bad value of one option; each surface names it its own way (``--batch-size``,
    ``--model_args batch_size``) with :meth:`named`."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name} {problem}")
        self.name, self.problem = name, problem

    def named(self, spell) -> InputError:
        return InputError(f"{spell(self.name)} {self.problem}")
