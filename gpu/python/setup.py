"""Installs mcfs_switch.pth beside the package (pyproject.toml has the rest).

A .pth file runs its `import` line at every interpreter start; this one
turns mcfs.patch_safetensors() on when MCFS_SAFETENSORS is set and imports
nothing otherwise. setuptools has no declarative way to put a file at the
top of site-packages, so build_py copies it there: into the wheel's build
directory for `pip install`, and for `pip install -e` (setuptools >= 64,
PEP 660) into the editable wheel's root, which setuptools points the
install command's install_lib at while it builds that wheel. The editable
wheel carries only a path hook to the source tree besides, so a .pth left in
the build directory alone (as before) was silently lost: MCFS_SAFETENSORS=1
then did nothing.
"""
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "mcfs_switch.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            dest = os.path.join(self.get_finalized_command("install").install_lib, PTH)
            try:
                shutil.copyfile(os.path.join(HERE, PTH), dest)
            except OSError as e:
                # Said where pip shows it: the install goes on without the switch.
                sys.stderr.write("mcfs: this editable install has no %s (%s): MCFS_SAFETENSORS=1 "
                                 "will not turn the safetensors switch on; call "
                                 "mcfs.patch_safetensors() in the program, or install without "
                                 "-e\n" % (PTH, e))
            return
        shutil.copyfile(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=1):
        out = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return out
        return out + [os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
