"""Installs mcfs_switch.pth beside the package (pyproject.toml has the rest).

A .pth file runs its `import` line at every interpreter start; this one
turns mcfs.patch_safetensors() on when MCFS_SAFETENSORS is set and imports
nothing otherwise. setuptools has no declarative way to put a file at the
top of site-packages, so build_py copies it there.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "mcfs_switch.pth"


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        dest = os.path.join(self.build_lib, PTH)
        shutil.copyfile(os.path.join(here, PTH), dest)

    def get_outputs(self, include_bytecode=1):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
