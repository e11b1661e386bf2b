"""The deploy test image's cache of compiled code for modules imported
from zip files (tests/deploy/make-image.sh installs it, with a .pth that
imports it at every start of the image's Python).

Each Ansible task runs its module as a zip (AnsiballZ) that Python
unpacks and compiles again, source and all of ansible.module_utils, at
every task: a second or more of the guest's CPU under TCG, the largest
share of each of the tens of tasks site.yml runs there twice.  zipimport
never keeps compiled code, so this does: keyed by the source's hash, kept
in /var/tmp (outside what the test's before/after snapshot compares).
The code is the same compile() makes, only its file name is the current
zip's, as without the cache.  Only zip imports are touched; nothing else
of the image's Python changes.
"""
import hashlib
import importlib.util
import marshal
import os
import zipimport

CACHE = "/var/tmp/pvgpu-zipimport-cache"


def _renamed(code, filename):
    consts = tuple(_renamed(c, filename) if isinstance(c, type(code)) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _install():
    compile_source = zipimport._compile_source

    def cached_compile_source(pathname, source):
        key = hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()
        path = os.path.join(CACHE, key)
        try:
            with open(path, "rb") as f:
                return _renamed(marshal.load(f), pathname)
        except (OSError, EOFError, ValueError, TypeError):
            pass
        code = compile_source(pathname, source)
        try:
            os.makedirs(CACHE, mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}"
            with open(tmp, "wb") as f:
                marshal.dump(code, f)
            os.replace(tmp, path)
        except OSError:
            pass
        return code

    zipimport._compile_source = cached_compile_source


_install()
