"""In-place gradient clipping for PyTorch models, with TF's formulas.

Layer: public adapter over the eight functions (the norm is :func:`anyclip.global_norm`'s).

Drop-in replacements for ``torch.nn.utils.clip_grad_norm_``, ``clip_grad_value_``,
``get_total_norm`` and ``clip_grads_with_norm_``, with torch's exact signatures (names, order,
defaults) and TF's numbers: change the import and nothing else. They work on ``p.grad`` in
place, skip parameters without a gradient, take a lone tensor or any iterable (a generator such
as ``model.parameters()`` included), honour ``foreach`` as torch does, and return the norm as a
tensor (no ``.item()``, so no host sync). Sparse gradients (``nn.Embedding(sparse=True)``) are
clipped through their values, as TF clips an ``IndexedSlices``. Arguments are read as torch
reads them (``float(max_norm)``, the truth value of ``foreach``, ``norm_type=nan``), with
torch's exception classes, and ``max_norm=inf`` leaves the gradients unchanged, as torch's
(TF's factor would make them NaN); a finite ``max_norm`` scales by TF's factor.

Two functions torch lacks give TF's other clippers on gradients: :func:`clip_grad_by_norm_`
(``tf.clip_by_norm`` on each gradient) and :func:`clip_grad_by_value_` (``tf.clip_by_value``
with two bounds). :func:`keras_clipping` gives a torch optimizer Keras's ``clipnorm``,
``clipvalue`` or ``global_clipnorm``. :func:`constrain_` and :func:`constrain_after_step`
apply Keras's weight constraints (:mod:`anyclip.constraints`) to parameters, the second after
every optimizer step as Keras does.

Importing this package imports torch; ``import anyclip`` alone does not.

>>> import torch
>>> from anyclip.torch import clip_grad_norm_
>>> p = torch.nn.Parameter(torch.zeros(2))
>>> p.grad = torch.tensor([3.0, 4.0])
>>> clip_grad_norm_([p], max_norm=1.0)
tensor(5.)
>>> p.grad
tensor([0.6000, 0.8000])
"""

from __future__ import annotations

from anyclip.torch._adaptive import adaptive_clip_grad_
from anyclip.torch._clip_grad import clip_grad_norm_, clip_grads_with_norm_, get_total_norm
from anyclip.torch._clip_value import clip_grad_by_norm_, clip_grad_by_value_, clip_grad_value_
from anyclip.torch._constraints import constrain_, constrain_after_step
from anyclip.torch._if_finite import ApplyIfFinite, apply_if_finite
from anyclip.torch._keras import keras_clipping
from anyclip.torch._quantile_clip import OptimizerWithClipping, QuantileClip
from anyclip.torch._skip_on_spike import SkipOnSpike, skip_on_spike
from anyclip.torch._total_norm import NonfiniteNormError
from anyclip.torch._zclip import ZClip

__all__ = [
    "ApplyIfFinite",
    "NonfiniteNormError",
    "OptimizerWithClipping",
    "QuantileClip",
    "SkipOnSpike",
    "ZClip",
    "adaptive_clip_grad_",
    "apply_if_finite",
    "clip_grad_by_norm_",
    "clip_grad_by_value_",
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "constrain_",
    "constrain_after_step",
    "get_total_norm",
    "keras_clipping",
    "skip_on_spike",
]
