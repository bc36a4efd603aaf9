"""Run by tests/device/test_suite_device.py in a child pytest with ``--device meta`` (not collected on its own)."""

import tiny_models


def test_the_option_reaches_the_tiny_models(device):
    assert str(device) == "meta"
    assert str(tiny_models.DEVICE) == "meta"  # what tiny_model() builds on
