#!/usr/bin/env python3
"""Generate the pvgpu protocol code from protocol/ops.spec.

    gen.py SPEC OUTDIR

writes into OUTDIR:
  pvgpu_proto.h / pvgpu_proto.c   message structs, bounds-checked codecs,
                                  the operation table (both sides)
  pvgpu_guest.h / pvgpu_guest.c   guest stubs: one function per operation
  pvgpu_dispatch.h / .c           backend: decode, call the handler, encode
  pvgpu_proto.py                  the same description for the Python tests

Generated files are build outputs; edit ops.spec or this file instead.
"""
import os
import re
import sys

FIXED = {
    "u8": ("uint8_t", 1), "u16": ("uint16_t", 2), "u32": ("uint32_t", 4),
    "u64": ("uint64_t", 8), "i32": ("int32_t", 4), "i64": ("int64_t", 8),
    "f32": ("float", 4),
}
ARRAYS = {"u32[]": "uint32_t", "i32[]": "int32_t", "u64[]": "uint64_t"}


class SpecError(Exception):
    pass


class Field:
    def __init__(self, direction, type_, name, max_, optional=False):
        self.dir, self.type, self.name, self.max = direction, type_, name, max_
        # Trailing and fixed: a peer from before it sends none (reads as 0).
        self.optional = optional

    @property
    def is_fixed(self):
        return self.type in FIXED

    def max_wire_size(self):
        if self.is_fixed:
            return FIXED[self.type][1]
        if self.type in ARRAYS:
            return 4 + self.max * FIXED[self.type[:-2]][1]
        return 4 + self.max


class Op:
    def __init__(self, name, opcode, kind, data, line):
        self.name, self.opcode, self.kind, self.line = name, opcode, kind, line
        self.data = data  # None or (direction, field name)
        self.ins, self.outs = [], []

    @property
    def upper(self):
        return self.name.upper()

    def max_req(self):
        return sum(f.max_wire_size() for f in self.ins)

    def max_rep(self):
        return 8 + sum(f.max_wire_size() for f in self.outs)


def parse(path):
    ops, version, cur = [], None, None
    retired = []
    features = {}
    with open(path) as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            where = f"{path}:{lineno}"
            if words[0] == "version":
                version = int(words[1])
            elif words[0] == "feature":
                if len(words) != 3 or not re.fullmatch(r"[a-z_][a-z0-9_]*", words[1]):
                    raise SpecError(f"{where}: expected 'feature NAME BIT'")
                bit = int(words[2])
                if bit < 0 or bit > 63 or bit in features.values() or words[1] in features:
                    raise SpecError(f"{where}: feature bit {bit} or name reused or out of range")
                features[words[1]] = bit
            elif words[0] == "retired":
                # An op moved elsewhere (the generic driver call): its
                # opcode stays taken, so no later op can mean it.
                if len(words) != 3:
                    raise SpecError(f"{where}: expected 'retired NAME OPCODE'")
                retired.append((words[1], int(words[2], 0), where))
                cur = None
            elif words[0] == "op":
                if len(words) < 4 or words[3] not in ("sync", "async"):
                    raise SpecError(f"{where}: expected 'op NAME OPCODE sync|async'")
                data = None
                for extra in words[4:]:
                    m = re.fullmatch(r"data=(in|out)\((\w+)\)", extra)
                    if not m:
                        raise SpecError(f"{where}: unknown attribute {extra!r}")
                    data = (m.group(1), m.group(2))
                cur = Op(words[1], int(words[2], 0), words[3], data, where)
                ops.append(cur)
            elif words[0] in ("in", "out"):
                if cur is None:
                    raise SpecError(f"{where}: field outside an op")
                if len(words) < 3:
                    raise SpecError(f"{where}: expected 'in|out TYPE NAME'")
                type_, name, max_, optional = words[1], words[2], None, False
                for extra in words[3:]:
                    m = re.fullmatch(r"max=(\d+)", extra)
                    if extra == "optional":
                        optional = True
                    elif not m:
                        raise SpecError(f"{where}: unknown attribute {extra!r}")
                    else:
                        max_ = int(m.group(1))
                if type_ not in FIXED and type_ not in ARRAYS and type_ not in ("str", "bytes"):
                    raise SpecError(f"{where}: unknown type {type_!r}")
                if not type_ in FIXED and not max_:
                    raise SpecError(f"{where}: {type_} needs max=N")
                field = Field(words[0], type_, name, max_, optional)
                fields = cur.ins if words[0] == "in" else cur.outs
                if optional and type_ not in FIXED:
                    raise SpecError(f"{where}: only a fixed-size field can be optional")
                if not optional and fields and fields[-1].optional:
                    raise SpecError(f"{where}: optional fields come last")
                fields.append(field)
            else:
                raise SpecError(f"{where}: unknown keyword {words[0]!r}")
    if version is None:
        raise SpecError(f"{path}: no 'version' line")
    seen_codes, seen_names = {}, set()
    for name, code, where in retired:
        if code in seen_codes or name in seen_names:
            raise SpecError(f"{where}: opcode {code:#x} or name {name} retired twice")
        seen_codes[code] = name
        seen_names.add(name)
    for op in ops:
        if op.opcode in seen_codes or op.opcode < 0x10 or op.opcode > 0xFFFF:
            raise SpecError(f"{op.line}: opcode {op.opcode:#x} reused or reserved")
        if op.name in seen_names:
            raise SpecError(f"{op.line}: op {op.name} declared twice")
        seen_codes[op.opcode] = op.name
        seen_names.add(op.name)
        if op.kind == "async" and op.outs:
            raise SpecError(f"{op.line}: async op {op.name} cannot have outputs")
        if op.data:
            names = {f.name: f for f in op.ins}
            if op.data[1] not in names or names[op.data[1]].type != "u64":
                raise SpecError(f"{op.line}: data length field must be an 'in u64'")
            if op.data[0] == "out" and op.kind == "async":
                raise SpecError(f"{op.line}: data=out needs a sync op")
    return version, ops, features


# --- C helpers ---------------------------------------------------------------

def c_member(f):
    if f.is_fixed:
        return [f"\t{FIXED[f.type][0]} {f.name};"]
    if f.type in ARRAYS:
        return [f"\t{ARRAYS[f.type]} {f.name}[{f.max}];", f"\tuint32_t {f.name}_count;"]
    if f.type == "str":
        return [f"\tchar {f.name}[{f.max + 1}];\t/* NUL-terminated */", f"\tuint32_t {f.name}_len;"]
    if f.dir == "in":  # bytes in: points into the received payload
        return [f"\tconst uint8_t *{f.name};", f"\tuint32_t {f.name}_len;"]
    return [f"\tuint8_t {f.name}[{f.max}];", f"\tuint32_t {f.name}_len;"]


def c_struct(op, which):
    fields = op.ins if which == "req" else op.outs
    lines = [f"struct pvgpu_{op.name}_{which} {{"]
    for f in fields:
        lines += c_member(f)
    if not fields:
        lines.append("\tuint8_t unused_;\t/* no fields; C wants one */")
    lines.append("};")
    return lines


def c_encode_body(fields):
    """Body writing fields of m into out (which has room for the max size)."""
    out = ["\tsize_t n = 0;", ""]
    if not fields:
        out = ["\t(void)out;", "\t(void)m;", "\treturn 0;"]
        return out
    for i, f in enumerate(fields):
        if f.optional:
            # Sent only up to the last one that is not 0: a peer from
            # before them reads exactly what it always did.
            later = " || ".join(f"m->{g.name}" for g in fields[i:])
            out += [f"\tif (!({later}))", "\t\treturn (long)n;"]
        if f.is_fixed:
            size = FIXED[f.type][1]
            if f.type == "f32":
                out.append(f"\t{{ uint32_t bits; memcpy(&bits, &m->{f.name}, 4); pvgpu_put_u32(out + n, bits); }}")
            elif size == 1:
                out.append(f"\tout[n] = m->{f.name};")
            else:
                cast = "" if f.type.startswith("u") else f"(uint{size*8}_t)"
                out.append(f"\tpvgpu_put_u{size*8}(out + n, {cast}m->{f.name});")
            out.append(f"\tn += {size};")
        elif f.type in ARRAYS:
            size = FIXED[f.type[:-2]][1]
            cast = "" if f.type.startswith("u") else f"(uint{size*8}_t)"
            out += [
                f"\tif (m->{f.name}_count > {f.max})",
                "\t\treturn -1;",
                f"\tpvgpu_put_u32(out + n, m->{f.name}_count);",
                "\tn += 4;",
                f"\tfor (uint32_t i = 0; i < m->{f.name}_count; i++, n += {size})",
                f"\t\tpvgpu_put_u{size*8}(out + n, {cast}m->{f.name}[i]);",
            ]
        else:
            out += [
                f"\tif (m->{f.name}_len > {f.max})",
                "\t\treturn -1;",
                f"\tpvgpu_put_u32(out + n, m->{f.name}_len);",
                "\tn += 4;",
                f"\tif (m->{f.name}_len)",
                f"\t\tmemcpy(out + n, m->{f.name}, m->{f.name}_len);",
                f"\tn += m->{f.name}_len;",
            ]
    out.append("\treturn (long)n;")
    return out


def c_decode_body(fields):
    out = ["\tstruct pvgpu_cur c = { p, n, 0 };", "", "\tmemset(m, 0, sizeof(*m));"]
    for f in fields:
        if f.optional:
            out += ["\tif (!c.left)\t/* a peer from before this field */",
                    "\t\treturn c.bad ? -1 : 0;"]
        if f.is_fixed:
            size = FIXED[f.type][1]
            ctype = FIXED[f.type][0]
            if f.type == "f32":
                out.append(f"\t{{ uint32_t bits = cur_u32(&c); memcpy(&m->{f.name}, &bits, 4); }}")
            elif size == 1:
                out.append(f"\tm->{f.name} = cur_u8(&c);")
            else:
                out.append(f"\tm->{f.name} = ({ctype})cur_u{size*8}(&c);")
        elif f.type in ARRAYS:
            size = FIXED[f.type[:-2]][1]
            ctype = ARRAYS[f.type]
            out += [
                f"\tm->{f.name}_count = cur_u32(&c);",
                f"\tif (m->{f.name}_count > {f.max} || (size_t)m->{f.name}_count * {size} > c.left)",
                "\t\treturn -1;",
                f"\tfor (uint32_t i = 0; i < m->{f.name}_count; i++)",
                f"\t\tm->{f.name}[i] = ({ctype})cur_u{size*8}(&c);",
            ]
        else:
            out += [
                f"\tm->{f.name}_len = cur_u32(&c);",
                f"\tif (c.bad || m->{f.name}_len > {f.max} || m->{f.name}_len > c.left)",
                "\t\treturn -1;",
            ]
            if f.type == "bytes" and f.dir == "in":
                out.append(f"\tm->{f.name} = c.p;")
            else:
                out.append(f"\tmemcpy(m->{f.name}, c.p, m->{f.name}_len);")
            if f.type == "str":
                out += [
                    f"\tm->{f.name}[m->{f.name}_len] = '\\0';",
                    f"\tif (memchr(c.p, '\\0', m->{f.name}_len))",
                    "\t\treturn -1;\t/* an embedded NUL would truncate it */",
                ]
            out += [f"\tc.p += m->{f.name}_len;", f"\tc.left -= m->{f.name}_len;"]
    out.append("\treturn c.bad || c.left ? -1 : 0;\t/* short or trailing bytes */")
    return out


def gen_proto_h(version, ops, features):
    o = ["/* Generated by protocol/gen.py from ops.spec: do not edit. */",
         "#ifndef PVGPU_PROTO_H", "#define PVGPU_PROTO_H", "",
         "#include <stddef.h>", "#include <stdint.h>", "", '#include "wire.h"', "",
         f"#define PVGPU_PROTO_VERSION {version}", "",
         "/* Feature bits of hello (ops.spec `feature` lines). */"] + [
         f"#define PVGPU_FEATURE_{name.upper()} (1ull << {bit})" for name, bit in features.items()] + [
         "/* Every feature this build knows. */",
         "#define PVGPU_FEATURES_KNOWN (0ull" + "".join(
             f" | PVGPU_FEATURE_{name.upper()}" for name in features) + ")", "",
         "/* Reply payload: i32 status, i32 deferred, then the op's outputs. */",
         "#define PVGPU_REPLY_PREFIX 8", "",
         "enum pvgpu_opcode {"]
    for op in ops:
        o.append(f"\tPVGPU_OP_{op.upper} = {op.opcode:#06x},")
    o += ["};", "",
          "/* The highest opcode ops.spec declares: an array indexed by opcode",
          " * has PVGPU_OP_MAX + 1 entries. */",
          f"#define PVGPU_OP_MAX {max(op.opcode for op in ops):#06x}", "",
          "enum pvgpu_data_dir { PVGPU_DATA_NONE, PVGPU_DATA_IN, PVGPU_DATA_OUT };", "",
          "struct pvgpu_op_info {",
          "\tconst char *name;",
          "\tuint16_t opcode;",
          "\tuint8_t is_async;",
          "\tuint8_t data_dir;\t/* enum pvgpu_data_dir */",
          "};", "",
          "/* NULL for an opcode that ops.spec does not declare. */",
          "const struct pvgpu_op_info *pvgpu_op_info(uint16_t opcode);", ""]
    for op in ops:
        o += c_struct(op, "req") + [""] + c_struct(op, "rep") + [""]
        o += [f"#define PVGPU_{op.upper}_REQ_MAX {max(op.max_req(), 1)}",
              f"#define PVGPU_{op.upper}_REP_MAX {op.max_rep()}",
              f"long pvgpu_{op.name}_req_encode(uint8_t *out, const struct pvgpu_{op.name}_req *m);",
              f"int pvgpu_{op.name}_req_decode(const uint8_t *p, size_t n, struct pvgpu_{op.name}_req *m);",
              f"long pvgpu_{op.name}_rep_encode(uint8_t *out, const struct pvgpu_{op.name}_rep *m);",
              f"int pvgpu_{op.name}_rep_decode(const uint8_t *p, size_t n, struct pvgpu_{op.name}_rep *m);",
              ""]
    o += ["#endif /* PVGPU_PROTO_H */", ""]
    return "\n".join(o)


CURSOR_HELPERS = """
/* Cursor reads: a short read marks the cursor bad and yields zero. */
static uint8_t cur_u8(struct pvgpu_cur *c)
{
	uint8_t v;

	if (c->left < 1) {
		c->bad = 1;
		return 0;
	}
	v = c->p[0];
	c->p += 1;
	c->left -= 1;
	return v;
}

static uint16_t cur_u16(struct pvgpu_cur *c)
{
	uint16_t v;

	if (c->left < 2) {
		c->bad = 1;
		return 0;
	}
	v = pvgpu_get_u16(c->p);
	c->p += 2;
	c->left -= 2;
	return v;
}

static uint32_t cur_u32(struct pvgpu_cur *c)
{
	uint32_t v;

	if (c->left < 4) {
		c->bad = 1;
		return 0;
	}
	v = pvgpu_get_u32(c->p);
	c->p += 4;
	c->left -= 4;
	return v;
}

static uint64_t cur_u64(struct pvgpu_cur *c)
{
	uint64_t v;

	if (c->left < 8) {
		c->bad = 1;
		return 0;
	}
	v = pvgpu_get_u64(c->p);
	c->p += 8;
	c->left -= 8;
	return v;
}
"""


def gen_proto_c(ops):
    used = set()
    for op in ops:
        for f in op.ins + op.outs:
            if f.is_fixed:
                used.add(FIXED[f.type][1])
            else:
                used.add(4)
                if f.type in ARRAYS:
                    used.add(FIXED[f.type[:-2]][1])
    o = ["/* Generated by protocol/gen.py from ops.spec: do not edit. */",
         "#include <string.h>", "", '#include "pvgpu_proto.h"']
    helpers = CURSOR_HELPERS
    for size, name in ((1, "cur_u8"), (2, "cur_u16"), (4, "cur_u32"), (8, "cur_u64")):
        if size not in used:
            helpers = re.sub(r"\nstatic uint\d+_t %s\(.*?\n}\n" % name, "\n", helpers, flags=re.S)
    o.append(helpers)
    o += ["static const struct pvgpu_op_info op_table[] = {"]
    for op in ops:
        dd = {None: "PVGPU_DATA_NONE", "in": "PVGPU_DATA_IN", "out": "PVGPU_DATA_OUT"}[op.data and op.data[0]]
        o.append(f'\t{{ "{op.name}", PVGPU_OP_{op.upper}, {1 if op.kind == "async" else 0}, {dd} }},')
    # A switch, not a scan: the worker looks every message up (a scan of
    # the table cost about as much as decoding a request).
    o += ["};", "",
          "const struct pvgpu_op_info *pvgpu_op_info(uint16_t opcode)", "{",
          "\tswitch (opcode) {"]
    o += [f"\tcase PVGPU_OP_{op.upper}: return &op_table[{i}];" for i, op in enumerate(ops)]
    o += ["\tdefault: return NULL;", "\t}", "}", ""]
    for op in ops:
        for which, fields in (("req", op.ins), ("rep", op.outs)):
            o += [f"long pvgpu_{op.name}_{which}_encode(uint8_t *out, const struct pvgpu_{op.name}_{which} *m)", "{"]
            o += c_encode_body(fields) + ["}", ""]
            o += [f"int pvgpu_{op.name}_{which}_decode(const uint8_t *p, size_t n, struct pvgpu_{op.name}_{which} *m)", "{"]
            o += c_decode_body(fields) + ["}", ""]
    return "\n".join(o)


def guest_sig(op):
    args = ["struct pvgpu_client *c", f"const struct pvgpu_{op.name}_req *req"]
    if op.kind == "sync":
        args.append(f"struct pvgpu_{op.name}_rep *rep")
    if op.data and op.data[0] == "in":
        args.append("const void *data")
    if op.data and op.data[0] == "out":
        args.append("void *data")
    return f"int32_t pvgpu_call_{op.name}({', '.join(args)})"


def gen_guest_h(ops):
    o = ["/* Generated by protocol/gen.py from ops.spec: do not edit. */",
         "#ifndef PVGPU_GUEST_H", "#define PVGPU_GUEST_H", "",
         '#include "pvgpu_proto.h"', "",
         "struct pvgpu_client;", "",
         "/*",
         " * One stub per operation.  Sync stubs return the backend's status (a",
         " * CUresult), or a deferred error from earlier async work when the call",
         " * itself succeeded; async stubs queue the message and return 0 unless",
         " * the connection is gone.",
         " */"]
    o += [guest_sig(op) + ";" for op in ops]
    o += ["", "#endif /* PVGPU_GUEST_H */", ""]
    return "\n".join(o)


def gen_guest_c(ops):
    o = ["/* Generated by protocol/gen.py from ops.spec: do not edit. */",
         '#include "pvgpu_guest.h"', '#include "client.h"', ""]
    for op in ops:
        o += [guest_sig(op), "{", f"\tuint8_t q[PVGPU_{op.upper}_REQ_MAX];",
              f"\tlong qn = pvgpu_{op.name}_req_encode(q, req);"]
        data_in = "data" if op.data and op.data[0] == "in" else "NULL"
        data_len = f"req->{op.data[1]}" if op.data else "0"
        if op.kind == "async":
            o += ["", "\tif (qn < 0)", "\t\treturn PVGPU_CLIENT_EENCODE;",
                  f"\treturn pvgpu_client_queue(c, PVGPU_OP_{op.upper}, q, (size_t)qn, {data_in}, {data_len});"]
        else:
            data_out = "data" if op.data and op.data[0] == "out" else "NULL"
            o += [f"\tuint8_t r[PVGPU_{op.upper}_REP_MAX];", "\tsize_t rn = 0;", "\tint32_t st;", "",
                  "\tif (qn < 0)", "\t\treturn PVGPU_CLIENT_EENCODE;",
                  f"\tst = pvgpu_client_call(c, PVGPU_OP_{op.upper}, q, (size_t)qn, {data_in}, {data_len},",
                  f"\t\t\t       {data_out}, r, sizeof(r), &rn);",
                  f"\tif (pvgpu_{op.name}_rep_decode(r, rn, rep) && st == 0)",
                  "\t\tst = PVGPU_CLIENT_EPROTO;",
                  "\treturn st;"]
        o += ["}", ""]
    return "\n".join(o)


def handler_sig(op):
    args = ["struct pvgpu_worker *w", f"const struct pvgpu_{op.name}_req *req"]
    if op.outs:
        args.append(f"struct pvgpu_{op.name}_rep *rep")
    return f"int32_t pvgpu_handle_{op.name}({', '.join(args)})"


def gen_dispatch_h(ops):
    o = ["/* Generated by protocol/gen.py from ops.spec: do not edit. */",
         "#ifndef PVGPU_DISPATCH_H", "#define PVGPU_DISPATCH_H", "",
         '#include "pvgpu_proto.h"', "", "struct pvgpu_worker;", "",
         "/* Written by hand in host-backend/: one per operation. */"]
    o += [handler_sig(op) + ";" for op in ops]
    o += ["",
          "/*",
          " * Decode the payload of `opcode`, run its handler and encode the reply",
          " * fields (after the status words) into rep, which has room for",
          " * PVGPU_MAX_REP bytes.  Returns the handler's status; a payload that does",
          " * not decode gives PVGPU_DISPATCH_EDECODE, with the op's outputs zeroed",
          " * in rep (protocol/README.md: a reply carries them whatever its status),",
          " * an undeclared opcode PVGPU_DISPATCH_EOPCODE with *rep_len 0.",
          " */",
          "#define PVGPU_DISPATCH_EDECODE (-1000)",
          "#define PVGPU_DISPATCH_EOPCODE (-1001)",
          f"#define PVGPU_MAX_REP {max(op.max_rep() for op in ops)}",
          "int32_t pvgpu_dispatch(struct pvgpu_worker *w, uint16_t opcode,",
          "\t\t       const uint8_t *payload, size_t len,",
          "\t\t       uint8_t *rep, size_t *rep_len);",
          "", "#endif /* PVGPU_DISPATCH_H */", ""]
    return "\n".join(o)


def gen_dispatch_c(ops):
    o = ["/* Generated by protocol/gen.py from ops.spec: do not edit. */",
         "#include <string.h>", "", '#include "pvgpu_dispatch.h"', ""]
    for op in ops:
        o += [f"static int32_t dispatch_{op.name}(struct pvgpu_worker *w, const uint8_t *p, size_t n,",
              "\t\t\t\tuint8_t *out, size_t *out_len)", "{",
              f"\tstruct pvgpu_{op.name}_req req;"]
        if op.outs:
            o += [f"\tstruct pvgpu_{op.name}_rep rep;", "\tlong len;"]
        o += ["\tint32_t st;", ""]
        if op.outs:
            # A request that does not decode still gets its outputs, zeroed.
            o += ["\tmemset(&rep, 0, sizeof(rep));",
                  f"\tif (pvgpu_{op.name}_req_decode(p, n, &req))",
                  "\t\tst = PVGPU_DISPATCH_EDECODE;",
                  "\telse",
                  f"\t\tst = pvgpu_handle_{op.name}(w, &req, &rep);",
                  f"\tlen = pvgpu_{op.name}_rep_encode(out, &rep);",
                  "\t*out_len = len < 0 ? 0 : (size_t)len;"]
        else:
            o += [f"\tif (pvgpu_{op.name}_req_decode(p, n, &req))",
                  "\t\treturn PVGPU_DISPATCH_EDECODE;",
                  f"\tst = pvgpu_handle_{op.name}(w, &req);", "\t(void)out;", "\t*out_len = 0;"]
        o += ["\treturn st;", "}", ""]
    o += ["int32_t pvgpu_dispatch(struct pvgpu_worker *w, uint16_t opcode,",
          "\t\t       const uint8_t *payload, size_t len,",
          "\t\t       uint8_t *rep, size_t *rep_len)", "{",
          "\t*rep_len = 0;", "\tswitch (opcode) {"]
    for op in ops:
        o += [f"\tcase PVGPU_OP_{op.upper}:",
              f"\t\treturn dispatch_{op.name}(w, payload, len, rep, rep_len);"]
    o += ["\tdefault:", "\t\treturn PVGPU_DISPATCH_EOPCODE;", "\t}", "}", ""]
    return "\n".join(o)


def gen_py(version, ops, features):
    o = ['"""Generated by protocol/gen.py from ops.spec: do not edit."""', "",
         f"VERSION = {version}", "MAGIC = 0x50475650", "HDR_FORMAT = '<IHHIIQ'",
         "OP_DATA = 0x0001", "OP_BATCH = 0x0002", "F_REPLY = 0x1", "",
         f"FEATURES = {features!r}",
         "# name -> (opcode, kind, data, ins, outs); fields are (type, name, max);",
         "# OPTIONAL fields are trailing and may be absent (an older peer)",
         "OPS = {"]
    for op in ops:
        ins = [(f.type, f.name, f.max) for f in op.ins]
        outs = [(f.type, f.name, f.max) for f in op.outs]
        o.append(f"    {op.name!r}: ({op.opcode:#06x}, {op.kind!r}, {op.data!r}, {ins!r}, {outs!r}),")
    o += ["}", "",
          "OPTIONAL = " + repr(sorted({(op.name, f.name) for op in ops
                                        for f in op.ins + op.outs if f.optional})), ""]
    return "\n".join(o)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: gen.py SPEC OUTDIR\n")
        return 2
    try:
        version, ops, features = parse(argv[1])
    except (SpecError, OSError, ValueError) as e:
        sys.stderr.write(f"gen.py: {e}\n")
        return 1
    outdir = argv[2]
    os.makedirs(outdir, exist_ok=True)
    files = {
        "pvgpu_proto.h": gen_proto_h(version, ops, features),
        "pvgpu_proto.c": gen_proto_c(ops),
        "pvgpu_guest.h": gen_guest_h(ops),
        "pvgpu_guest.c": gen_guest_c(ops),
        "pvgpu_dispatch.h": gen_dispatch_h(ops),
        "pvgpu_dispatch.c": gen_dispatch_c(ops),
        "pvgpu_proto.py": gen_py(version, ops, features),
    }
    for name, text in files.items():
        path = os.path.join(outdir, name)
        # Only rewrite what changed, so make does not rebuild everything.
        try:
            with open(path) as f:
                if f.read() == text:
                    continue
        except OSError:
            pass
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
