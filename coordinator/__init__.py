"""Tether coordinator: the control plane that hands host agents work over outbound HTTP."""

__version__ = "0.1.0"
