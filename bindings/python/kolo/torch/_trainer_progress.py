# SPDX-License-Identifier: Apache-2.0
"""The Trainer's progress bar: one tqdm bar per training epoch, on rank 0 only.

As Lightning's TQDMProgressBar: the bar shows the epoch, the batches done out of the epoch's
batches, the rate (it/s), the loss of the last step and the values logged with prog_bar=True in
that step (this rank's values, not reduced). It is drawn only when
Trainer(enable_progress_bar=True) (the default), on rank 0, when stderr is a terminal and tqdm
is importable (Debian: python3-tqdm). Otherwise epoch_bar() returns a bar that does nothing, so
a job whose output goes to a file or a pipe (kolorun prefixes every line) stays clean.
"""

import sys

__all__ = ["epoch_bar"]


class _NoBar:
    """The bar when none is drawn."""

    def update(self, loss=None):
        pass

    def close(self):
        pass


_NO_BAR = _NoBar()


def _is_terminal(stream):
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(callable(isatty) and isatty())
    except (OSError, ValueError):  # a closed or detached stream
        return False


def _tqdm_class():
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def epoch_bar(trainer, total, stream=None):
    """The bar of the training epoch trainer.current_epoch, of `total` batches (None: unknown),
    written to `stream` (sys.stderr by default); a no-op bar unless one is to be drawn."""
    stream = sys.stderr if stream is None else stream
    if not getattr(trainer, "enable_progress_bar", True) or not trainer.is_global_zero:
        return _NO_BAR
    if not _is_terminal(stream):
        return _NO_BAR
    tqdm = _tqdm_class()
    if tqdm is None:
        return _NO_BAR
    return _Bar(tqdm, trainer, total, stream)


class _Bar:
    def __init__(self, tqdm, trainer, total, stream):
        self._trainer = trainer
        self._bar = tqdm(total=total, desc="Epoch %d" % trainer.current_epoch, file=stream,
                         unit="it", dynamic_ncols=True, leave=True)

    def update(self, loss=None):
        """One training batch done; `loss` is its loss tensor (None for a skipped batch)."""
        shown = {}
        if loss is not None:
            shown["loss"] = "%.4g" % float(loss.detach())
        step_log = getattr(self._trainer, "_step_log", None)
        if step_log is not None:
            for name, (_, value, _, prog_bar) in sorted(step_log.local().items()):
                if prog_bar and name != "loss":
                    shown[name] = "%.4g" % value
        self._bar.set_postfix(shown, refresh=False)
        self._bar.update(1)

    def close(self):
        self._bar.close()
