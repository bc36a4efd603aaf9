"""The one contract every public result class follows.

A result is a frozen dataclass of tensors, labels and JSON values — never the model — with:

    result[label]                 the value(s) of one labelled row (a label object or its text)
    result.to_dataframe()         one row per label, a ``label_column`` column naming it
    result.top(k, *, by, absolute)  the k rows with the largest ``by`` (|by| if ``absolute``), a DataFrame
    result.plot(**options)        a plotly Figure (built by :mod:`interp.plots`, never shown)
    result.save(path) / Cls.load(path)   one ``.safetensors`` file (tensors + JSON metadata)

The row argument that picks one prompt of a batch is called ``prompt`` everywhere.
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

import pandas as pd

from interp._io import SaveLoadMixin
from interp._validate import check_positive_int
from interp.errors import ArgumentError, LabelError

__all__ = ["Result"]


class Result(SaveLoadMixin):
    """Base of every public result class (see the module docstring for the contract).

    Subclasses set ``label_column`` (the DataFrame column holding the label, e.g. ``"term"``) and
    ``default_by`` (the column ``top`` ranks by), and implement ``to_dataframe``, ``plot`` and
    ``_row(index)`` (the value(s) of the i-th label); ``labels`` lists the row labels.
    """

    label_column: ClassVar[str] = "label"
    default_by: ClassVar[str] = "value"
    labels: Any

    def _row(self, index: int) -> Any:
        raise NotImplementedError

    def _index(self, label: Any) -> int:
        text = str(label) if not isinstance(label, str) else label
        try:
            return list(self.labels).index(text)
        except ValueError:
            labels = list(self.labels)
            ex = labels if len(labels) <= 6 else labels[:3] + ["…"] + labels[-3:]
            raise LabelError(f"label={label!r} is not a row of this {type(self).__name__}; rows look like {ex}") from None

    def __getitem__(self, label: Any) -> Any:
        return self._row(self._index(label))

    def __contains__(self, label: Any) -> bool:
        return (str(label) if not isinstance(label, str) else label) in list(self.labels)

    def to_dataframe(self) -> pd.DataFrame:
        raise NotImplementedError

    def top(self, k: int = 10, *, by: Optional[str] = None, absolute: bool = True) -> pd.DataFrame:
        """The ``k`` rows of :meth:`to_dataframe` with the largest ``by`` (its magnitude if ``absolute``)."""
        check_positive_int("k", k)
        df = self.to_dataframe()
        by = self.default_by if by is None else by
        if by not in df.columns:
            numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])]
            raise ArgumentError(f"by={by!r} is not a column of {type(self).__name__}.to_dataframe(); "
                                f"numeric columns: {numeric}")
        key = df[by].abs() if absolute else df[by]
        order = key.sort_values(ascending=False, kind="stable").index
        return df.loc[order].head(k).reset_index(drop=True)

    def plot(self, **options: Any) -> Any:
        raise NotImplementedError
