"""tapmachine: TAP machines and UCD-LMI for Boltzmann machines."""

__version__ = "0.1.0"
