"""Reading NVIDIA's C headers with libclang: what the surface generators
share (gen_api.py for cuda.h, gen_nvml.py for nvml.h).

parse()        the function declarations, typedefs and enums of a header
renames()      its '#define old new' lines that rename one entry point
exported_nm()  the names an 'nm -D' listing of NVIDIA's library holds
c_string()     a Python string as a C string literal's body
"""
import os
import re
import subprocess
import sys

import clang.cindex as ci


def gcc_include():
    """The compiler's own include directory (stddef.h and friends)."""
    try:
        out = subprocess.run(['cc', '-print-file-name=include'],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


class Header:
    """What one parse found: functions and typedefs by name (cursors) whose
    names start with one of the prefixes, and each enum's constants."""

    def __init__(self):
        self.funcs = {}
        self.typedefs = {}
        self.enums = {}	# enum declaration's name -> [(value, name, text)]


def parse(include, src, defines=(), prefixes=('cu',), who='gen'):
    """Parse src (a few #include lines) against include; exit on errors."""
    args = ['-x', 'c', '-std=c11', '-I' + include]
    args += ['-D' + d for d in defines]
    gi = gcc_include()
    if gi:
        args.append('-I' + gi)
    tu = ci.Index.create().parse('pvgpu_api.c', args=args,
                                 unsaved_files=[('pvgpu_api.c', src)])
    errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if errors:
        sys.exit('%s: cannot parse %s: %s' % (who, src.strip(), errors[0]))
    h = Header()
    prefixes = tuple(prefixes)
    for c in tu.cursor.get_children():
        if c.kind == ci.CursorKind.ENUM_DECL:
            consts = []
            for e in c.get_children():
                text = ' '.join((e.brief_comment or e.spelling).split())
                consts.append((e.enum_value, e.spelling, text))
            h.enums[c.spelling] = consts
        elif c.kind == ci.CursorKind.FUNCTION_DECL and c.spelling.startswith(prefixes):
            h.funcs[c.spelling] = c
        elif c.kind == ci.CursorKind.TYPEDEF_DECL and c.spelling.startswith(prefixes):
            h.typedefs[c.spelling] = c
            # A typedef of an anonymous enum: its constants under the typedef's name.
            under = c.underlying_typedef_type.get_declaration()
            if under.kind == ci.CursorKind.ENUM_DECL and under.spelling not in h.enums:
                h.enums[c.spelling] = [
                    (e.enum_value, e.spelling,
                     ' '.join((e.brief_comment or e.spelling).split()))
                    for e in under.get_children()]
    return h


def signature(ftype):
    """Canonical argument types of a function type."""
    return tuple(a.get_canonical().spelling for a in ftype.argument_types())


def renames(path, prefix):
    """A header's '#define prefixX prefixY' lines: old name -> new name."""
    out = {}
    text = open(path).read()
    pat = r'^\s*#\s*define\s+(%s\w+)\s+(%s\w+)\s*$' % (prefix, prefix)
    for m in re.finditer(pat, text, re.M):
        out.setdefault(m.group(1), m.group(2))
    return out


def exported_nm(path, prefix):
    """The names an 'nm -D' (or plain one name a line) listing holds."""
    names = set()
    if os.path.exists(path):
        for line in open(path):
            w = line.split()
            if w and w[-1].startswith(prefix):
                names.add(w[-1].split('@')[0])
    return names


def c_string(text):
    return text.replace('\\', '\\\\').replace('"', '\\"')
