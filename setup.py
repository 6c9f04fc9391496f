"""Metadata lives in setup.cfg; this file only declares the compiled replay loops.

The extension is optional: without a C compiler the install still succeeds and parasim falls back to
its numpy replay (same results, slower; simulator/native warns once). -ffp-contract=off
keeps the compiler from fusing multiply-adds, so the C loops round exactly as the numpy references.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("simulator.native._native", ["simulator/native/_native.c"], optional=True,
                             extra_compile_args=["-O2", "-ffp-contract=off"])])
