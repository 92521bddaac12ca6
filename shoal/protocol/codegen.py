"""Compile a message spec + version into straight-line Python decode/encode code.

Why generate source: a generic interpreter that walks field descriptions on
every message pays a dictionary lookup and a call per field. Like construct's
own compiler, we emit one function per (struct, version) in which runs of
fixed-width fields become a single precompiled `struct.Struct` call, lengths
are checked against the buffer before anything is sliced, and array counts are
checked against the bytes left before a list is grown — so a lying length
costs nothing. Decoding works on a memoryview: `records` (and `zeroCopy`
bytes) come back as memoryview slices of the frame, never copied.

Encoding appends pieces to a list; the caller joins them or hands the list to
`transport.writelines`, so a 1 MiB record batch is copied at most once.

The construct structures in `construct_codec` describe the same layouts
declaratively; tests check that both agree byte for byte, and decode failures
are re-parsed with construct to name the failing field.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, cast

from shoal.protocol import spec as S
from shoal.protocol.exceptions import ProtocolError
from shoal.protocol.limits import MAX_ARRAY_ELEMENTS, MAX_TAGGED_FIELDS
from shoal.protocol.messages import classes_for

_FIXED = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
    "uuid": ("16s", 16),
}

# ---------------------------------------------------------------------------
# runtime helpers referenced by generated code


def _rest_uvarint(buf: Any, pos: int, b: int) -> tuple[int, int]:
    """Continue an unsigned varint whose first byte (b, >= 0x80) was consumed."""
    value = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes", offset=pos)


def _skip_tags(buf: Any, pos: int, end: int) -> int:
    """Skip a tagged-field section holding only tags this version does not know."""
    count = buf[pos]
    pos += 1
    if count & 0x80:
        count, pos = _rest_uvarint(buf, pos, count)
    if count > MAX_TAGGED_FIELDS or 2 * count > end - pos:  # a tag and a size: 2 bytes at least
        raise ProtocolError(f"tagged-field section of {count} fields", offset=pos)
    for _ in range(count):
        b = buf[pos]
        pos += 1
        if b & 0x80:
            _, pos = _rest_uvarint(buf, pos, b)
        size = buf[pos]
        pos += 1
        if size & 0x80:
            size, pos = _rest_uvarint(buf, pos, size)
        pos += size
        if pos > end:
            raise ProtocolError("tagged field exceeds the bytes left", offset=pos)
    return pos


_SMALL_UV = [bytes((i,)) for i in range(128)]


def _uv(n: int) -> bytes:
    if n < 128:
        return _SMALL_UV[n]
    if n < 0 or n > 0xFFFFFFFF:
        raise ProtocolError(f"value {n} does not fit an unsigned varint")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_UUID_CACHE: dict[bytes, uuid.UUID] = {}


def _uuid(raw: bytes) -> uuid.UUID:
    u = _UUID_CACHE.get(raw)
    if u is None:
        if len(_UUID_CACHE) > 4096:
            _UUID_CACHE.clear()
        u = _UUID_CACHE[raw] = uuid.UUID(bytes=raw)
    return u


def _fail(message: str, path: str, offset: int) -> ProtocolError:
    return ProtocolError(message, path=path, offset=offset)


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


# Null markers as source literals for the generated code.
NULL_COMPACT = "b'\\x00'"
NULL_ARRAY = "b'\\xff\\xff\\xff\\xff'"

# ---------------------------------------------------------------------------
# source emitter


class _Src:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ind = 0
        self.consts: dict[str, object] = {}
        self.n = 0

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    def var(self, prefix: str = "v") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value: object, prefix: str = "K") -> str:
        for k, v in self.consts.items():
            if v is value or (type(v) is type(value) and v == value and not isinstance(v, list)):
                return k
        name = f"_{prefix}{len(self.consts)}"
        self.consts[name] = value
        return name


def _is_fixed(f: S.FieldSpec) -> bool:
    return not f.is_array and f.struct is None and f.type in _FIXED


def _flex_for(f: S.FieldSpec, version: int, flexible: bool) -> bool:
    if f.flexible_versions is not None:
        return version in f.flexible_versions
    return flexible


class Compiler:
    """Generates and caches the functions for one message spec."""

    def __init__(self, message: S.MessageSpec, strict: bool = True) -> None:
        self.strict = strict
        self.message = message
        self.classes = classes_for(message.name)
        self.src = _Src()
        self.done: dict[tuple[str, int, str], str] = {}

    # -- naming -----------------------------------------------------------
    def fname(self, struct: S.StructSpec, version: int, kind: str) -> str:
        key = (struct.name, version, kind)
        name = self.done.get(key)
        if name is None:
            name = f"{kind}_{struct.name}_v{version}"
            self.done[key] = name
            if kind == "d":
                self._emit_decoder(struct, version, name)
            else:
                self._emit_encoder(struct, version, name)
        return name

    # -- decoding ---------------------------------------------------------
    def _emit_decoder(self, st: S.StructSpec, version: int, name: str) -> None:
        src = _Src()
        src.consts = self.src.consts
        src(f"def {name}(buf, pos, end):")
        src.ind += 1
        expr = self._emit_struct_body(src, st, version, "end")
        src(f"return {expr}, pos")
        self.src.lines.extend(src.lines)
        self.src.lines.append("")

    def _emit_struct_body(self, src: _Src, st: S.StructSpec, version: int, end_var: str) -> str:
        """Emit code decoding `st` at `pos`; return the expression building the object.

        Nested structs are emitted inline rather than called: a call and a
        tuple return per element is most of the cost of decoding arrays of
        small structs (acknowledgement batches, partitions).
        """
        flexible = self.message.flexible(version)
        regular, tagged = st.fields_in(version)
        values: dict[str, str] = {}
        i = 0
        while i < len(regular):
            f = regular[i]
            if _is_fixed(f):
                run = [f]
                while i + 1 < len(regular) and _is_fixed(regular[i + 1]):
                    i += 1
                    run.append(regular[i])
                fmt = ">" + "".join(_FIXED[r.type][0] for r in run)
                size = sum(_FIXED[r.type][1] for r in run)
                sname = src.const(struct.Struct(fmt), "S")
                names = [src.var() for _ in run]
                src(f"{', '.join(names)}, = {sname}.unpack_from(buf, pos)")
                src(f"pos += {size}")
                for r, n in zip(run, names, strict=True):
                    if r.type == "uuid":
                        src(f"{n} = _uuid({n})")
                    values[r.attr] = n
            else:
                values[f.attr] = self._emit_read(src, f, version, flexible, st, end_var)
            i += 1
        if flexible and not tagged:
            src("if buf[pos]:")
            src(f"    pos = _skip_tags(buf, pos, {end_var})")
            src("else:")
            src("    pos += 1")
        elif flexible:
            for f in tagged:
                values[f.attr] = src.var()
                src(f"{values[f.attr]} = {self._default_expr(src, f)}")
            ntag = self._read_uv(src)
            src(f"if {ntag} > {MAX_TAGGED_FIELDS} or 2 * {ntag} > {end_var} - pos:")
            src(f"    raise _fail('too many tagged fields', {st.name + '.<tags>'!r}, pos)")
            src(f"for _ in range({ntag}):")
            src.ind += 1
            tag_var = self._read_uv(src)
            size_var = self._read_uv(src)
            tend = src.var("tend")
            src(f"{tend} = pos + {size_var}")
            src(f"if {tend} > {end_var}:")
            src(f"    raise _fail('tagged field exceeds buffer', {st.name + '.<tags>'!r}, pos)")
            first = True
            for f in tagged:
                src(f"{'if' if first else 'elif'} {tag_var} == {f.tag}:")
                first = False
                src.ind += 1
                v = self._emit_read(src, f, version, flexible, st, end_var=tend)
                src(f"{values[f.attr]} = {v}")
                src(f"if pos > {tend}:")
                src(f"    raise _fail('tagged field overruns its size', {st.name + '.' + f.attr!r}, pos)")
                src.ind -= 1
            src(f"pos = {tend}")
            src.ind -= 1
        cls = self.classes[st.name]
        cname = src.const(cls, "C")
        args = []
        for f in st.fields:
            if f.attr in values:
                args.append(values[f.attr])
            else:
                args.append(self._default_expr(src, f))
        return f"{cname}({', '.join(args)})"

    def _default_expr(self, src: _Src, f: S.FieldSpec) -> str:
        if f.is_array:
            return "None" if f.default is None else "[]"
        if f.struct is not None:
            if f.default is None:
                return "None"
            return f"{src.const(self.classes[f.struct.name], 'C')}()"
        if isinstance(f.default, (int, float, bool, str, bytes)) or f.default is None:
            return repr(f.default)
        return src.const(f.default)

    def _read_uv(self, src: _Src) -> str:
        v = src.var("u")
        src(f"{v} = buf[pos]")
        src("pos += 1")
        src(f"if {v} & 0x80:")
        src(f"    {v}, pos = _rest_uvarint(buf, pos, {v})")
        return v

    def _read_len(self, src: _Src, flex: bool, kind: str) -> str:
        """A length/count prefix; -1 means null. kind: 'str' | 'bytes' | 'array'."""
        if flex:
            v = self._read_uv(src)
            src(f"{v} -= 1")
            return v
        v = src.var("n")
        fmt = {"str": "_I16", "bytes": "_I32", "array": "_I32"}[kind]
        size = 2 if kind == "str" else 4
        src(f"{v}, = {fmt}.unpack_from(buf, pos)")
        src(f"pos += {size}")
        return v

    def _null_check(self, src: _Src, n: str, f: S.FieldSpec, version: int, out: str, path: str) -> None:
        """Handle a negative length: None where nullable, else an error."""
        src(f"if {n} < 0:")
        src.ind += 1
        if f.nullable(version):
            src(f"if {n} != -1:")
            src(f"    raise _fail('negative length', {path!r}, pos)")
            src(f"{out} = None")
        else:
            src(f"raise _fail('null value in a non-nullable field', {path!r}, pos)")
        src.ind -= 1

    def _emit_read(
        self,
        src: _Src,
        f: S.FieldSpec,
        version: int,
        flexible: bool,
        st: S.StructSpec,
        end_var: str = "end",
    ) -> str:
        out = src.var()
        path = f"{st.name}.{f.attr}"
        flex = _flex_for(f, version, flexible)
        elem = f.element_type
        if f.is_array:
            n = self._read_len(src, flex, "array")
            self._null_check(src, n, f, version, out, path)
            src("else:")
            src.ind += 1
            src(f"if {n} > {MAX_ARRAY_ELEMENTS}:")
            src(f"    raise _fail('array of more than {MAX_ARRAY_ELEMENTS} elements', {path!r}, pos)")
            if f.struct is None and elem in _FIXED and elem != "uuid":
                code, size = _FIXED[elem]
                src(f"if {n} * {size} > {end_var} - pos:")
                src(f"    raise _fail('array longer than the bytes left', {path!r}, pos)")
                if code == "b":
                    src(f"{out} = buf[pos:pos + {n}].cast('b').tolist()")
                else:
                    src(f"{out} = list(_unpack_from(f'>{{{n}}}{code}', buf, pos))")
                src(f"pos += {n} * {size}")
            else:
                src(f"if {n} > {end_var} - pos:")
                src(f"    raise _fail('array longer than the bytes left', {path!r}, pos)")
                app = src.var("app")
                src(f"{out} = []")
                src(f"{app} = {out}.append")
                src(f"for _ in range({n}):")
                src.ind += 1
                if f.struct is not None:
                    expr = self._emit_struct_body(src, f.struct, version, end_var)
                    src(f"{app}({expr})")
                else:
                    x = self._emit_scalar(src, elem, f, version, flex, path, end_var, nullable=False)
                    src(f"{app}({x})")
                src.ind -= 1
            src.ind -= 1
            return out
        if f.struct is not None:
            if f.nullable(version):
                m = src.var("m")
                src(f"{m}, = _I8.unpack_from(buf, pos)")
                src("pos += 1")
                src(f"if {m} < 0:")
                src(f"    {out} = None")
                src("else:")
                src.ind += 1
                expr = self._emit_struct_body(src, f.struct, version, end_var)
                src(f"{out} = {expr}")
                src.ind -= 1
            else:
                expr = self._emit_struct_body(src, f.struct, version, end_var)
                src(f"{out} = {expr}")
            return out
        x = self._emit_scalar(src, elem, f, version, flex, path, end_var, nullable=f.nullable(version))
        src(f"{out} = {x}")
        return out

    def _emit_scalar(
        self,
        src: _Src,
        t: str,
        f: S.FieldSpec,
        version: int,
        flex: bool,
        path: str,
        end_var: str,
        nullable: bool,
    ) -> str:
        out = src.var()
        if t in _FIXED:
            code, size = _FIXED[t]
            sname = src.const(struct.Struct(">" + code), "S")
            src(f"{out}, = {sname}.unpack_from(buf, pos)")
            src(f"pos += {size}")
            if t == "uuid":
                src(f"{out} = _uuid({out})")
            return out
        if t in ("string", "bytes", "records"):
            n = self._read_len(src, flex, "str" if t == "string" else "bytes")
            src(f"if {n} < 0:")
            src.ind += 1
            if nullable:
                src(f"if {n} != -1:")
                src(f"    raise _fail('negative length', {path!r}, pos)")
                src(f"{out} = None")
            else:
                src(f"raise _fail('null value in a non-nullable field', {path!r}, pos)")
            src.ind -= 1
            src("else:")
            src.ind += 1
            e = src.var("e")
            src(f"{e} = pos + {n}")
            src(f"if {e} > {end_var}:")
            src(f"    raise _fail('length exceeds the bytes left', {path!r}, pos)")
            if t == "string":
                src(f"{out} = str(buf[pos:{e}], 'utf-8')")
            elif t == "records" or f.zero_copy:
                src(f"{out} = buf[pos:{e}]")
            else:
                src(f"{out} = bytes(buf[pos:{e}])")
            src(f"pos = {e}")
            src.ind -= 1
            return out
        raise ValueError(f"unsupported type {t}")

    # -- encoding ---------------------------------------------------------
    def _emit_encoder(self, st: S.StructSpec, version: int, name: str) -> None:
        flexible = self.message.flexible(version)
        src = _Src()
        src.consts = self.src.consts
        src.n = self.src.n
        src(f"def {name}(o, _o):")
        src.ind += 1
        src("_a = _o.append")
        regular, tagged = st.fields_in(version)
        present = {f.attr for f in regular} | {f.attr for f in tagged}
        for f in st.fields:
            if f.attr in present or f.ignorable:
                continue
            if self.strict:
                self._emit_absent_check(src, f, version)
        i = 0
        while i < len(regular):
            f = regular[i]
            if _is_fixed(f):
                run = [f]
                while i + 1 < len(regular) and _is_fixed(regular[i + 1]):
                    i += 1
                    run.append(regular[i])
                fmt = ">" + "".join(_FIXED[r.type][0] for r in run)
                sname = src.const(struct.Struct(fmt), "S")
                args = [f"o.{r.attr}.bytes" if r.type == "uuid" else f"o.{r.attr}" for r in run]
                src(f"_a({sname}.pack({', '.join(args)}))")
            else:
                self._emit_write(src, f, f"o.{f.attr}", version, flexible, st)
            i += 1
        if flexible:
            if not tagged:
                src("_a(b'\\x00')")
            else:
                tl = src.var("t")
                src(f"{tl} = []")
                for f in tagged:
                    cond = self._non_default_cond(src, f, f"o.{f.attr}")
                    src(f"if {cond}:")
                    src.ind += 1
                    src("_saved = (_a, _o)")
                    src("_o = []")
                    src("_a = _o.append")
                    self._emit_write(src, f, f"o.{f.attr}", version, flexible, st)
                    src("_d = b''.join(_o)")
                    src("_a, _o = _saved")
                    src(f"{tl}.append(_uv({f.tag}) + _uv(len(_d)) + _d)")
                    src.ind -= 1
                src(f"_a(_uv(len({tl})))")
                src(f"for _x in {tl}:")
                src("    _a(_x)")
        self.src.n = src.n
        self.src.lines.extend(src.lines)
        self.src.lines.append("")

    def _non_default_cond(self, src: _Src, f: S.FieldSpec, expr: str) -> str:
        if f.is_array:
            return f"{expr} is not None and len({expr}) > 0" if f.default is not None else f"{expr} is not None"
        if f.struct is not None:
            if f.default is None:
                return f"{expr} is not None"
            return f"{expr} != {src.const(self.classes[f.struct.name], 'C')}()"
        return f"{expr} != {self._default_expr(src, f)}"

    def _emit_absent_check(self, src: _Src, f: S.FieldSpec, version: int) -> None:
        expr = f"o.{f.attr}"
        cond = self._non_default_cond(src, f, expr)
        if f.struct is not None and not f.is_array:
            return  # structs that a version lacks are simply not written
        src(f"if {cond}:")
        src(f"    raise _fail('field {f.name} is not in version {version} and is not ignorable', {f.attr!r}, -1)")

    def _emit_write(self, src: _Src, f: S.FieldSpec, expr: str, version: int, flexible: bool, st: S.StructSpec) -> None:
        flex = _flex_for(f, version, flexible)
        v = src.var("w")
        src(f"{v} = {expr}")
        if f.is_array:
            src(f"if {v} is None:")
            if f.nullable(version):
                src(f"    _a({NULL_COMPACT if flex else NULL_ARRAY})")
            else:
                src(f"    raise _fail('null array in a non-nullable field', {f.attr!r}, -1)")
            src("else:")
            src.ind += 1
            if flex:
                src(f"_a(_uv(len({v}) + 1))")
            else:
                src(f"_a(_I32.pack(len({v})))")
            elem = f.element_type
            if f.struct is not None:
                fn = self.fname(f.struct, version, "e")
                src(f"for _x in {v}:")
                src(f"    {fn}(_x, _o)")
            elif elem in _FIXED and elem != "uuid":
                code = _FIXED[elem][0]
                src(f"_a(_pack(f'>{{len({v})}}{code}', *{v}))")
            else:
                src(f"for _x in {v}:")
                src.ind += 1
                self._emit_scalar_write(src, elem, "_x", flex, f, version, nullable=False)
                src.ind -= 1
            src.ind -= 1
            return
        if f.struct is not None:
            fn = self.fname(f.struct, version, "e")
            if f.nullable(version):
                src(f"if {v} is None:")
                src("    _a(b'\\xff')")
                src("else:")
                src("    _a(b'\\x01')")
                src(f"    {fn}({v}, _o)")
            else:
                src(f"{fn}({v}, _o)")
            return
        self._emit_scalar_write(src, f.type, v, flex, f, version, nullable=f.nullable(version))

    def _emit_scalar_write(
        self, src: _Src, t: str, v: str, flex: bool, f: S.FieldSpec, version: int, nullable: bool
    ) -> None:
        if t in _FIXED:
            sname = src.const(struct.Struct(">" + _FIXED[t][0]), "S")
            src(f"_a({sname}.pack({v + '.bytes' if t == 'uuid' else v}))")
            return
        null_bytes = "b'\\x00'" if flex else ("b'\\xff\\xff'" if t == "string" else "b'\\xff\\xff\\xff\\xff'")
        src(f"if {v} is None:")
        if nullable:
            src(f"    _a({null_bytes})")
        else:
            src(f"    raise _fail('null value in a non-nullable field', {f.attr!r}, -1)")
        src("else:")
        src.ind += 1
        if t == "string":
            b = src.var("b")
            src(f"{b} = {v}.encode('utf-8')")
        else:
            b = v
        if flex:
            src(f"_a(_uv(len({b}) + 1))")
        elif t == "string":
            src(f"_a(_I16.pack(len({b})))")
        else:
            src(f"_a(_I32.pack(len({b})))")
        src(f"_a({b})")
        src.ind -= 1

    # -- assembly ---------------------------------------------------------
    def build(self, version: int) -> tuple[Callable, Callable]:
        d = self.fname(self.message.struct, version, "d")
        e = self.fname(self.message.struct, version, "e")
        ns: dict[str, object] = {
            "_rest_uvarint": _rest_uvarint,
            "_skip_tags": _skip_tags,
            "_uv": _uv,
            "_uuid": _uuid,
            "_fail": _fail,
            "_I8": _I8,
            "_I16": _I16,
            "_I32": _I32,
            "_unpack_from": struct.unpack_from,
            "_pack": struct.pack,
        }
        ns.update(self.src.consts)
        code = "\n".join(self.src.lines)
        exec(compile(code, f"<shoal-codec {self.message.name}>", "exec"), ns)  # noqa: S102
        return cast(Callable, ns[d]), cast(Callable, ns[e])  # defined by the exec above


def compile_message(message: S.MessageSpec, version: int, strict: bool = True) -> tuple[Callable, Callable]:
    """Return (decode(buf, pos, end) -> (obj, pos), encode(obj, out_list)) for one version."""
    return Compiler(message, strict).build(version)


def source_of(message: S.MessageSpec, version: int) -> str:
    """The generated source for one version (for reading and debugging)."""
    c = Compiler(message)
    c.fname(message.struct, version, "d")
    c.fname(message.struct, version, "e")
    return "\n".join(c.src.lines)
