"""Configs in and out (issue 25): a Megatron-LM / NeMo, torchtitan or DeepSpeed job read as a parasim
scenario (`parasim import`), and a layout written back as the framework's flags, TOML or JSON
(`parasim emit`, `parasim sweep --emit`). docs/import-export.md.

- fields.py: a config as flat keys read through typed getters; what was never read is reported;
- megatron_args.py: Megatron command lines and NeMo YAML as Megatron argument names;
- megatron.py, megatron_model.py: those arguments as a scenario; torchtitan.py, deepspeed.py: theirs;
- emit_*.py: a scenario's layout as each framework's configuration;
- scenario_doc.py: the scenario document as TOML, checked by loading it.
"""
