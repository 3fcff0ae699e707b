"""Tether coordinator: the control plane that hands host agents work over outbound HTTP."""

from __future__ import annotations

__version__ = "0.1.0"
