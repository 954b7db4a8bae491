"""Imported by mcfs_switch.pth at interpreter start when MCFS_SAFETENSORS is set."""
import sys

try:
    from . import patch_safetensors

    patch_safetensors()
except Exception as e:  # a broken switch must not stop the interpreter
    sys.stderr.write("mcfs: MCFS_SAFETENSORS is set but the switch failed: %s: %s\n"
                     % (type(e).__name__, e))
