#!/usr/bin/env python3
"""Generate pvgpu's libcuda.so.1 surface from NVIDIA's cuda.h (libclang).

usage: gen_api.py CUDA_INCLUDE OUTDIR [--coverage FILE]

Reads cuda.h and cudaTypedefs.h with __CUDA_API_VERSION_INTERNAL defined
(so the legacy unsuffixed entry points are declared under their own names,
as NVIDIA's driver exports them, beside the _v2/_v3/_ptds/_ptsz ones), and
writes into OUTDIR:

  cuda_surface.c   a CUDA_ERROR_NOT_SUPPORTED stub for every function that
                   annotations.py does not name as hand-written, and the
                   cuGetProcAddress table: (name, version, stream kind) ->
                   entry, from the PFN_<name>_v<version>[_ptds|_ptsz]
                   typedefs
  libcuda.map      the version script: every exported name global
  api-coverage.md  every function and its kind (README: "What libcuda.so.1 covers")
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import annotations  # noqa: E402
import header  # noqa: E402

PFN_RE = re.compile(r'^PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?$')
SUFFIX_RE = re.compile(r'^(cu\w+?)(?:_v(\d+))?(_ptds|_ptsz)?$')


def parse(include):
    # cudaTypedefs.h includes cuda.h; the profiler's two live apart.
    src = '#include <cudaTypedefs.h>\n'
    if os.path.exists(os.path.join(include, 'cudaProfiler.h')):
        src += '#include <cudaProfiler.h>\n#include <cudaProfilerTypedefs.h>\n'
    h = header.parse(include, src, defines=['__CUDA_API_VERSION_INTERNAL'],
                     prefixes=('cu', 'PFN_cu'), who='gen_api')
    funcs = {n: c for n, c in h.funcs.items() if n.startswith('cu')}
    pfns = {n: c for n, c in h.typedefs.items() if n.startswith('PFN_cu')}
    return funcs, pfns, h.enums.get('cudaError_enum', [])


signature = header.signature


def renames(include):
    """cuda.h's '#define cuX cuX_v2' lines: legacy name -> current symbol."""
    return header.renames(os.path.join(include, 'cuda.h'), 'cu')


def variant_rank(sym, base):
    m = SUFFIX_RE.match(sym)
    if m and m.group(1) == base:
        return int(m.group(2) or 1)
    return 100  # a renamed target (cuGraphInstantiate -> ...WithFlags)


def proc_table(funcs, pfns, rename):
    """[(name, version, kind, symbol)]; kind 0 plain, 1 ptds/ptsz."""
    by_base = {}
    for td, c in pfns.items():
        m = PFN_RE.match(td)
        if not m:
            continue
        base, ver, pt = m.group(1), int(m.group(2)), m.group(3) or ''
        ftype = c.underlying_typedef_type.get_canonical().get_pointee()
        by_base.setdefault(base, []).append((ver, pt, signature(ftype)))
    table, problems = [], []
    for base, entries in sorted(by_base.items()):
        for pt in ('', '_ptds', '_ptsz'):
            vers = sorted(e for e in entries if e[1] == pt)
            if not vers:
                continue
            cands = [s for s in funcs
                     if (SUFFIX_RE.match(s) and SUFFIX_RE.match(s).group(1) == base
                         and (SUFFIX_RE.match(s).group(3) or '') == pt)]
            tgt = rename.get(base)
            if tgt and tgt in funcs and tgt not in cands and not pt:
                cands.append(tgt)
            cands.sort(key=lambda s: variant_rank(s, base))
            sigs = {s: signature(funcs[s].type) for s in cands}
            used = set()
            for i, (ver, _, sig) in enumerate(vers):
                match = [s for s in cands if sigs[s] == sig and s not in used]
                if len(cands) == len(vers):
                    sym = cands[i]
                elif match:
                    sym = match[0]
                else:
                    problems.append('%s v%d%s' % (base, ver, pt))
                    continue
                used.add(sym)
                table.append((base, ver, 1 if pt else 0, sym))
    # Functions no PFN names (none in 13.0, but never lose one).
    named = {t[0] for t in table} | {t[3] for t in table}
    for f in funcs:
        if f not in named and not SUFFIX_RE.match(f).group(3):
            table.append((f, 0, 0, f))
    return table, problems


def measured_table(path, known, pfn_table):
    """The cuGetProcAddress table from driver 580's answers (procaddr.tsv:
    name, version, flags, result, status, symbol per request, measured on
    the H100): for each name and stream kind (flags 2: per-thread), the
    versions where the answer changes; a NULL entry: version too old."""
    rows = {}
    for line in open(path).read().splitlines()[1:]:
        name, ver, flags, _res, st, sym = line.split('\t')
        kind = 1 if int(flags) & 2 else 0
        if int(flags) == 1 or int(st) == 1:
            continue  # legacy stream: as flags 0; unknown names: left out
        rows.setdefault((name, kind), []).append((int(ver), sym))
    # The probe sampled some versions only: where an entry appears between
    # two samples, the PFN typedef's version says exactly where.
    pfn_ver = {(n, k, s): v for n, v, k, s in pfn_table}
    table = []
    for (name, kind), answers in sorted(rows.items()):
        last, prev = None, 0
        for ver, sym in sorted(answers):
            if sym != '-' and sym not in known:
                sys.exit('gen_api: procaddr.tsv names %s, not exported' % sym)
            if sym != last:
                at = pfn_ver.get((name, kind, sym), ver)
                table.append((name, at if prev < at <= ver else ver, kind,
                              None if sym == '-' else sym))
                last = sym
            prev = ver
    return table


def main():
    if len(sys.argv) < 3:
        sys.exit('usage: gen_api.py CUDA_INCLUDE OUTDIR')
    include, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    funcs, pfns, errors = parse(include)
    rename = renames(include)
    table, problems = proc_table(funcs, pfns, rename)
    for p in problems:
        print('gen_api: no entry point for PFN %s' % p, file=sys.stderr)

    fwd = set(annotations.names(annotations.FORWARDED))
    loc = set(annotations.names(annotations.LOCAL))
    # The generic driver call's lines (gen_generic.py) are forwarded too;
    # here each is checked against cuda.h.
    gen = annotations.generic()
    for _, name, types, _ in gen:
        if name in fwd or name in loc:
            sys.exit('gen_api: %s is both generic and hand-written' % name)
        c = funcs.get(name)
        if c is None:
            continue
        have = [a.type.spelling.replace(' ', '') for a in c.get_arguments()]
        want = [t.split('@')[0].rstrip('!').replace(' ', '') for t in types]
        # const_T*: a structure sent, in_T* one sent where cuda.h does not
        # say const; out_T*: one returned (gen_generic.py).
        want = ['const' + t[len('const_'):] if t.startswith('const_') else
                t.split('_', 1)[1] if t.startswith(('in_', 'out_')) else t
                for t in want]
        if have != want:
            sys.exit('gen_api: GENERIC %s: annotated (%s), cuda.h has (%s)'
                     % (name, ', '.join(want), ', '.join(have)))
    fwd |= {name for _, name, _, _ in gen}
    fwd |= {alias for alias, _ in annotations.generic_aliases()}
    both = fwd & loc
    if both:
        sys.exit('gen_api: both forwarded and local: %s' % sorted(both))
    exported = set(funcs)
    exported |= header.exported_nm(os.path.join(HERE, 'libcuda580.nm'), 'cu')
    unknown = (fwd | loc) - exported
    if unknown:
        sys.exit('gen_api: annotated but not in cuda.h: %s' % sorted(unknown))
    exported = sorted(exported)
    tsv = os.path.join(HERE, 'procaddr.tsv')
    if os.path.exists(tsv):
        # Measured answers where there are some; cudaTypedefs.h's elsewhere.
        measured = measured_table(tsv, set(exported), table)
        probed = {line.split('\t')[0] for line in open(tsv).read().splitlines()[1:]}
        table = measured + [t for t in table if t[0] not in probed]

    def kind(n):
        return 'forwarded' if n in fwd else 'local' if n in loc else 'not supported'

    with open(os.path.join(outdir, 'cuda_surface.c'), 'w') as f:
        f.write('/* Generated by protocol/api/gen_api.py from cuda.h: do not edit. */\n')
        f.write('#include <stddef.h>\n#include "cuda_surface.h"\n\n')
        for n in exported:
            if n in fwd or n in loc:
                f.write('extern int %s(void);\n' % n)
        # Entry points of other headers (GL, EGL, VDPAU, profiler) too.
        f.write('\n')
        for n in exported:
            if n not in fwd and n not in loc:
                f.write('int %s(void);\nint %s(void) { return pvgpu_cuda_unsupported("%s"); }\n'
                        % (n, n, n))
        f.write('\nconst struct pvgpu_proc pvgpu_proc_table[] = {\n')
        for base, ver, pt, sym in sorted(table, key=lambda t: (t[0], t[2], t[1])):
            f.write('\t{ "%s", %d, %d, %s },\n' % (
                base, ver, pt, '(void *)' + sym if sym else 'NULL'))
        f.write('};\nconst size_t pvgpu_proc_count = %d;\n' % len(table))
        f.write('\nconst char *const pvgpu_exported_names[] = {\n')
        for n in exported:
            f.write('\t"%s",\n' % n)
        f.write('};\nconst size_t pvgpu_exported_count = %d;\n' % len(exported))
        f.write('\nconst struct pvgpu_cu_errname pvgpu_cu_errors[] = {\n')
        for code, name, text in errors:
            f.write('\t{ %d, "%s", "%s" },\n' % (code, name, header.c_string(text)))
        f.write('};\nconst size_t pvgpu_cu_error_count = %d;\n' % len(errors))

    with open(os.path.join(outdir, 'libcuda.map'), 'w') as f:
        f.write('/* Generated by protocol/api/gen_api.py: do not edit. */\n{\nglobal:\n')
        for n in exported:
            f.write('\t%s;\n' % n)
        # pvgpu's own (guest-lib/cuda/cuda_init.c): wire round trips, wake-ups.
        f.write('\tpvgpu_wire_stats;\n\tpvgpu_ring_wakes;\n')
        f.write('local:\n\t*;\n};\n')

    counts = {}
    for n in exported:
        counts[kind(n)] = counts.get(kind(n), 0) + 1
    with open(os.path.join(outdir, 'api-coverage.md'), 'w') as f:
        f.write('# libcuda.so.1: API coverage\n\n')
        f.write('Generated by `protocol/api/gen_api.py` from CUDA 13.0\'s `cuda.h` '
                'and `protocol/api/annotations.py`; do not edit.\n\n')
        f.write('%d functions exported: %s.\n\n' % (
            len(exported), ', '.join('%d %s' % (counts.get(k, 0), k)
                                     for k in ('forwarded', 'local', 'not supported'))))
        f.write('| function | kind |\n|---|---|\n')
        for n in exported:
            f.write('| `%s` | %s |\n' % (n, kind(n)))


if __name__ == '__main__':
    main()
