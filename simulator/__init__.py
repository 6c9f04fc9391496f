"""parasim: simulate distributed transformer training before renting the cluster.

Import name `simulator`; console command `parasim`. See docs/architecture.md for the module map.
"""
__version__ = "0.1.0"
