"""The wire between the code sandbox's processes: plain values, framing, and a small symmetric RPC.

Self-contained (standard library only): `sandbox.py` sends this source, followed by `_harness.py`'s,
into each sandbox, where only the interpreter's own prefix is visible. The host imports it to
`decode` what the tests' sandbox reports.

Wire format: 4-byte big-endian length, then JSON. Plain values are tagged (`encode`); anything
else crosses as a reference `["r", id]` to an object kept by its owner. `decode` builds only
exact built-in types (never subclasses) and proxies, so nothing the answer sends can carry code or
an `__eq__` of its own; messages are capped in size and depth.
"""

from __future__ import annotations

import json
import os
import struct

MAX_MESSAGE = 16 << 20
_MAX_DEPTH = 200
_PLAIN_SCALARS = (type(None), bool, int, float, str, bytes, bytearray, complex)


class WireError(Exception):
    """A malformed or oversized message: the channel to the answer is unusable from here on."""


class AnswerError(Exception):
    """The answer raised an exception whose type is not a built-in exception."""


class AnswerGone(Exception):
    """The answer's process closed the channel (it exited, crashed or was killed)."""


# ---- values ---------------------------------------------------------------------------------


def _hexf(value: float) -> str:
    return value.hex()


def encode(value, ref=None, depth: int = 0):
    """A plain value as JSON-ready data; other objects through `ref(obj)` (or TypeError without)."""
    if depth > _MAX_DEPTH:
        raise WireError("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -(1 << 53) < value < (1 << 53) else ["i", hex(value)]
    if kind is float:
        return ["f", _hexf(value)]
    if kind is complex:
        return ["c", _hexf(value.real), _hexf(value.imag)]
    if kind is bytes or kind is bytearray:
        return ["b" if kind is bytes else "ba", value.decode("latin-1")]
    if kind in (list, tuple, set, frozenset):
        tag = {list: "l", tuple: "t", set: "s", frozenset: "fs"}[kind]
        return [tag, [encode(v, ref, depth + 1) for v in value]]
    if kind is dict:
        return ["d", [[encode(k, ref, depth + 1), encode(v, ref, depth + 1)] for k, v in value.items()]]
    if ref is None:
        raise TypeError("not a plain value: %s" % kind.__name__)
    return ref(value)


def decode(data, resolve=None, depth: int = 0):
    """Inverse of `encode`; references through `resolve(tag, id)`. Raises WireError on bad data."""
    if depth > _MAX_DEPTH:
        raise WireError("value nested too deeply")
    if data is None or type(data) in (bool, str, int):
        return data
    if type(data) is not list or not data or type(data[0]) is not str:
        raise WireError("bad value")
    tag = data[0]
    try:
        if tag == "i":
            return int(data[1], 16)
        if tag == "f":
            return float.fromhex(data[1])
        if tag == "c":
            return complex(float.fromhex(data[1]), float.fromhex(data[2]))
        if tag in ("b", "ba"):
            raw = data[1].encode("latin-1")
            return raw if tag == "b" else bytearray(raw)
        if tag in ("l", "t", "s", "fs"):
            items = [decode(v, resolve, depth + 1) for v in data[1]]
            return {"l": list, "t": tuple, "s": set, "fs": frozenset}[tag](items)
        if tag == "d":
            return {decode(k, resolve, depth + 1): decode(v, resolve, depth + 1) for k, v in data[1]}
        if tag in ("r", "R") and resolve is not None and type(data[1]) is int:
            return resolve(tag, data[1])
    except WireError:
        raise
    except Exception as exc:  # wrong arity, unhashable key, bad hex: all malformed
        raise WireError("bad value: %s" % type(exc).__name__) from None
    raise WireError("bad value tag")


def is_plain(value, depth: int = 0) -> bool:
    if depth > _MAX_DEPTH:
        return False
    kind = type(value)
    if kind in _PLAIN_SCALARS:
        return True
    if kind in (list, tuple, set, frozenset):
        return all(is_plain(v, depth + 1) for v in value)
    if kind is dict:
        return all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return False


# ---- framing --------------------------------------------------------------------------------


def _read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise AnswerGone("channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(fd: int, message) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_MESSAGE:
        raise WireError("message over %d bytes" % MAX_MESSAGE)
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def receive(fd: int):
    (size,) = struct.unpack(">I", _read_exact(fd, 4))
    if size > MAX_MESSAGE:
        raise WireError("message over %d bytes" % MAX_MESSAGE)
    try:
        return json.loads(_read_exact(fd, size))
    except (ValueError, RecursionError):
        raise WireError("message is not JSON") from None


# ---- the peer: a small symmetric RPC over a pipe pair -----------------------------------------

_OPS = ("call", "getattr", "getitem", "setitem", "len", "iter", "next", "contains", "str", "repr")


class Peer:
    """Both ends run one: objects it exported by id, proxies for the other side's objects."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfd, self.wfd = rfd, wfd
        self.exported: dict = {}
        self.ids: dict = {}
        self.proxies: dict = {}
        self.seq = 0
        self.broken: Exception | None = None

    # values
    def ref(self, obj):
        if isinstance(obj, Proxy) and obj._peer is self:
            return ["R", obj._id]
        key = id(obj)
        if key not in self.ids:
            self.ids[key] = len(self.exported) + 1
            self.exported[self.ids[key]] = obj
        return ["r", self.ids[key]]

    def resolve(self, tag, ident):
        if tag == "R":  # the other side hands back one of our own objects
            if ident not in self.exported:
                raise WireError("unknown object")
            return self.exported[ident]
        if ident not in self.proxies:
            self.proxies[ident] = Proxy(self, ident)
        return self.proxies[ident]

    def encode(self, value):
        return encode(value, self.ref)

    def decode(self, data):
        return decode(data, self.resolve)

    # requests
    def request(self, op, target, *args):
        if self.broken is not None:
            raise AnswerGone("channel unusable: %s" % self.broken)
        self.seq += 1
        seq = self.seq
        try:
            send(self.wfd, ["q", seq, op, target, [self.encode(a) for a in args]])
            while True:
                message = receive(self.rfd)
                if type(message) is not list or not message:
                    raise WireError("bad message")
                if message[0] == "q":
                    self.serve_one(message)
                    continue
                if message[0] in ("ok", "err") and len(message) >= 3 and message[1] == seq:
                    break
                # a stale or forged reply (e.g. from a forked child of the answer): ignored
            if message[0] == "ok":
                value = self.decode(message[2])
                if op == "call" and len(message) > 3:
                    self._update_args(args, message[3])
                return value
        except (WireError, AnswerGone, OSError) as exc:
            self.broken = exc
            raise AnswerGone(str(exc)) from None
        raise _exception(message[2:4])

    def _update_args(self, args, updates) -> None:
        """Arguments the callee mutated in place (a list it sorted) are updated here too."""
        if type(updates) is not list or len(args) != 2:
            raise WireError("bad updates")
        positional, keywords = args
        for item in updates:
            if type(item) is not list or len(item) != 2:
                raise WireError("bad update")
            key, data = item
            if type(key) is int and 0 <= key < len(positional):
                target = positional[key]
            elif type(key) is str and key in keywords:
                target = keywords[key]
            else:
                raise WireError("bad update")
            value = self.decode(data)
            if type(target) is not type(value):
                raise WireError("update changes type")
            if type(target) in (list, bytearray):
                target[:] = value
            elif type(target) in (dict, set):
                target.clear()
                target.update(value)

    # serving
    def serve_one(self, message) -> None:
        seq = message[1] if len(message) > 1 else None
        try:
            if len(message) != 5 or message[2] not in _OPS or type(message[4]) is not list:
                raise WireError("bad request")
            target = self.exported.get(message[3])
            if target is None:
                raise WireError("unknown object")
            args = [self.decode(a) for a in message[4]]
            value = _apply(message[2], target, args)
            updates = []
            if message[2] == "call":
                if len(args) != 2 or type(args[0]) is not list or type(args[1]) is not dict:
                    raise WireError("bad call")
                for key, arg in [*enumerate(args[0]), *args[1].items()]:
                    if type(arg) in (list, dict, set, bytearray):
                        try:
                            updates.append([key, encode(arg)])
                        except (TypeError, WireError):
                            pass
            reply = ["ok", seq, self.encode(value), updates]
        except WireError:
            raise
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt,)):
                raise
            reply = ["err", seq, type(exc).__name__, str(exc)[:2000]]
        try:
            send(self.wfd, reply)
        except WireError:
            send(self.wfd, ["err", seq, "ValueError", "value too large to return"])

    def serve_forever(self) -> None:
        while True:
            try:
                message = receive(self.rfd)
            except AnswerGone:
                return
            if type(message) is list and message and message[0] == "q":
                self.serve_one(message)


def _apply(op, target, args):
    if op == "call":
        positional, keywords = args
        return target(*positional, **keywords)
    if op == "getattr":
        return getattr(target, args[0])
    if op == "getitem":
        return target[args[0]]
    if op == "setitem":
        target[args[0]] = args[1]
        return None
    if op == "len":
        return len(target)
    if op == "iter":
        return iter(target)
    if op == "next":
        return next(target)
    if op == "contains":
        return args[0] in target
    if op == "str":
        return str(target)
    return repr(target)


def _exception(parts):
    import builtins

    name, text = (parts + [None, None])[:2]
    kind = getattr(builtins, name, None) if type(name) is str else None
    text = text if type(text) is str else ""
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(text)
        except Exception:  # an exception class with a different constructor
            pass
    return AnswerError("%s: %s" % (name, text))


class Proxy:
    """An object living in the other sandbox. It has no truth value and equals only itself."""

    __slots__ = ("__weakref__", "_id", "_peer")

    def __init__(self, peer, ident) -> None:
        object.__setattr__(self, "_peer", peer)
        object.__setattr__(self, "_id", ident)

    def _ask(self, op, *args):
        return self._peer.request(op, self._id, *args)

    def __call__(self, *args, **kwargs):
        return self._ask("call", list(args), dict(kwargs))

    def __getattr__(self, name):
        return self._ask("getattr", name)

    def __getitem__(self, key):
        return self._ask("getitem", key)

    def __setitem__(self, key, value):
        self._ask("setitem", key, value)

    def __len__(self):
        value = self._ask("len")
        if type(value) is not int:
            raise TypeError("len() of an answer object is not an int")
        return value

    def __iter__(self):
        return self._ask("iter")

    def __next__(self):
        return self._ask("next")

    def __contains__(self, item):
        value = self._ask("contains", item)
        if type(value) is not bool:
            raise TypeError("membership test of an answer object did not give a bool")
        return value

    def __str__(self):
        value = self._ask("str")
        return value if type(value) is str else "<answer object>"

    def __repr__(self):
        value = self._ask("repr")
        return value if type(value) is str else "<answer object>"

    def __bool__(self):
        raise TypeError("an object of the answer has no truth value here (return a plain value)")

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    __hash__ = object.__hash__
