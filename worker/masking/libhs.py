"""Hyperscan through the system's shared library (`libhs.so.5`), bound with ctypes.

Why a second binding of the same library: the `hyperscan` wheels on PyPI link a
Hyperscan built for the x86-64 baseline (`FAT_RUNTIME=OFF`: no AVX2 code at all),
while distributions ship the fat-runtime build, which picks AVX2 or AVX-512 code for
the CPU it runs on (Debian and Ubuntu: `libhyperscan5`). Same engine, same results;
on the typical jobs the scan takes about 40% less time (docs/PERFORMANCE.md,
"Masking"). The prefilter needs a handful of calls of the C API, bound here; what
to compile and how to read the matches stays in `prefilter`.

`load()` returns None when the library is absent or cannot run on this CPU, and the
prefilter then uses the wheel (or plain Python).
"""

import ctypes
import os
import threading
from collections.abc import Iterator
from typing import Any

HS_SUCCESS = 0
HS_MODE_BLOCK = 1
HS_FLAG_CASELESS = 1

# Where to look, first match wins: an explicit path (PROMPT_WORKER_LIBHS), then the
# soname of Hyperscan 5 (Debian's libhyperscan5), then whatever the linker finds.
_ENV_PATH = "PROMPT_WORKER_LIBHS"
_SONAME = "libhs.so.5"
# Buffers from this size on are scanned with the GIL released: only a long scan repays
# the thread switch (docs/PERFORMANCE.md, "Masking").
_RELEASE_GIL_FROM = 1 << 20
_MAX_LENGTH = 0xFFFFFFFF  # hs_scan's length is an unsigned int

# (expression id, start offset, end offset, flags, context) -> nonzero to stop.
_MatchHandler = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_uint,
    ctypes.c_ulonglong,
    ctypes.c_ulonglong,
    ctypes.c_uint,
    ctypes.c_void_p,
)


class LibhsError(RuntimeError):
    """A libhs call failed; carries the library's message or error code."""


class _CompileError(ctypes.Structure):
    _fields_ = [("message", ctypes.c_char_p), ("expression", ctypes.c_int)]


class Library:
    """The loaded `libhs` with the prototypes of the calls used."""

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self.cdll = cdll
        p, u = ctypes.c_void_p, ctypes.c_uint
        self.version = _function(cdll, "hs_version", ctypes.c_char_p, [])
        self.valid_platform = _function(cdll, "hs_valid_platform", ctypes.c_int, [])
        self.compile_multi = _function(
            cdll,
            "hs_compile_multi",
            ctypes.c_int,
            [
                ctypes.POINTER(ctypes.c_char_p),
                ctypes.POINTER(u),
                ctypes.POINTER(u),
                u,
                u,
                p,
                ctypes.POINTER(p),
                ctypes.POINTER(ctypes.POINTER(_CompileError)),
            ],
        )
        self.free_compile_error = _function(
            cdll, "hs_free_compile_error", ctypes.c_int, [ctypes.POINTER(_CompileError)]
        )
        self.free_database = _function(cdll, "hs_free_database", ctypes.c_int, [p])
        # A compiled database as bytes and back, for the on-disk cache (`db_cache`).
        self.serialize_database = _function(
            cdll,
            "hs_serialize_database",
            ctypes.c_int,
            [p, ctypes.POINTER(p), ctypes.POINTER(ctypes.c_size_t)],
        )
        self.deserialize_database = _function(
            cdll, "hs_deserialize_database", ctypes.c_int, [p, ctypes.c_size_t, ctypes.POINTER(p)]
        )
        # hs_serialize_database allocates with malloc (its default misc allocator).
        self.free = _function(ctypes.CDLL(None), "free", None, [p])
        self.alloc_scratch = _function(
            cdll, "hs_alloc_scratch", ctypes.c_int, [p, ctypes.POINTER(p)]
        )
        self.free_scratch = _function(cdll, "hs_free_scratch", ctypes.c_int, [p])
        # hs_scan(database, data, length, flags, scratch, handler, context) is called
        # with arguments of the right C types already (`Database.scan`) and no
        # `argtypes`: converting them on each call cost more than a typical scan's
        # whole C call (0.5 against 0.7 us). Data goes as a bytes object's buffer.
        self.scan = _function(cdll, "hs_scan", ctypes.c_int, None)
        # The same function without releasing the GIL: releasing and taking it back
        # costs about as much again on a short scan.
        self.scan_holding_gil = _function(ctypes.PyDLL(cdll._name), "hs_scan", ctypes.c_int, None)


def _function(cdll: ctypes.CDLL, name: str, restype: Any, argtypes: list[Any] | None) -> Any:
    function = getattr(cdll, name)
    function.restype = restype
    if argtypes is not None:
        function.argtypes = argtypes
    return function


_loaded: dict[str, Library | None] = {}
_load_lock = threading.Lock()


def load() -> Library | None:
    """The system's libhs, or None when it is missing or cannot run on this CPU."""
    with _load_lock:
        if "library" not in _loaded:
            _loaded["library"] = _load()
        return _loaded["library"]


def _candidates() -> Iterator[str]:
    """Names to try, in order. The linker's search runs only when the soname failed:
    it imports subprocess and runs `ldconfig -p`, a cost to every start-up otherwise."""
    yield os.environ.get(_ENV_PATH, "")
    yield _SONAME
    import ctypes.util

    yield ctypes.util.find_library("hs") or ""


def _load() -> Library | None:
    for name in filter(None, _candidates()):
        try:
            library = Library(ctypes.CDLL(name))
        except (OSError, AttributeError):  # absent, or not Hyperscan
            continue
        # The fat runtime needs at least SSSE3; anything else is refused by every call.
        if library.valid_platform() != HS_SUCCESS:
            return None
        return library
    return None


class Database:
    """A compiled block-mode database and a scratch space per thread that scans it.

    Compiled from `expressions` and `flags`, or read from `serialized` (what `serialize`
    returned, possibly in another process); a `serialized` the library refuses (corrupt,
    another version or platform) is a LibhsError."""

    def __init__(
        self,
        library: Library,
        expressions: list[bytes],
        flags: list[int],
        serialized: bytes | None = None,
    ) -> None:
        self._lib = library
        handle = ctypes.c_void_p()
        if serialized is not None:
            status = library.deserialize_database(serialized, len(serialized), ctypes.byref(handle))
            if status != HS_SUCCESS:
                raise LibhsError(f"hs_deserialize_database failed with {status}")
        else:
            self._compile(expressions, flags, handle)
        self._handle = handle
        self._local = threading.local()
        self._scratches: list[ctypes.c_void_p] = []
        self._scratches_lock = threading.Lock()

    def _compile(self, expressions: list[bytes], flags: list[int], handle: ctypes.c_void_p) -> None:
        library = self._lib
        count = len(expressions)
        error = ctypes.POINTER(_CompileError)()
        status = library.compile_multi(
            (ctypes.c_char_p * count)(*expressions),
            (ctypes.c_uint * count)(*flags),
            (ctypes.c_uint * count)(*range(count)),
            count,
            HS_MODE_BLOCK,
            None,
            ctypes.byref(handle),
            ctypes.byref(error),
        )
        if status != HS_SUCCESS:
            message, index = "unknown error", -1
            if error:
                message = (error.contents.message or b"").decode("utf-8", "replace")
                index = error.contents.expression
                library.free_compile_error(error)
            raise LibhsError(f"expression {index}: {message}")

    def serialize(self) -> bytes:
        """The compiled database as bytes, for `Database(..., serialized=...)`."""
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        status = self._lib.serialize_database(self._handle, ctypes.byref(data), ctypes.byref(size))
        if status != HS_SUCCESS:
            raise LibhsError(f"hs_serialize_database failed with {status}")
        try:
            return ctypes.string_at(data, size.value)
        finally:
            self._lib.free(data)

    def _thread_state(self) -> tuple[ctypes.c_void_p, Any, list[tuple[int, int]]]:
        scratch = ctypes.c_void_p()
        status = self._lib.alloc_scratch(self._handle, ctypes.byref(scratch))
        if status != HS_SUCCESS:
            raise LibhsError(f"hs_alloc_scratch failed with {status}")
        with self._scratches_lock:
            self._scratches.append(scratch)
        # One ctypes callback per thread, made once (making one costs more than a
        # scan), appending to the thread's list; `scan` hands the matches over.
        found: list[tuple[int, int]] = []
        append = found.append

        def on_match(expression: int, start: int, end: int, flags: int, context: Any) -> int:
            append((end, expression))
            return 0

        state = (scratch, _MatchHandler(on_match), found)
        self._local.state = state
        return state

    def scan(self, data: bytes) -> list[tuple[int, int]]:
        """(end offset, expression id) of every match in `data`, in the order found."""
        try:
            scratch, handler, found = self._local.state
        except AttributeError:
            scratch, handler, found = self._thread_state()
        size = len(data)
        if size < _RELEASE_GIL_FROM:
            status = self._lib.scan_holding_gil(self._handle, data, size, 0, scratch, handler, None)
        else:  # long enough for other threads to use the time; unsigned length
            if size > _MAX_LENGTH:
                raise LibhsError(f"cannot scan {size} bytes in one block")
            status = self._lib.scan(
                self._handle, data, ctypes.c_uint(size), 0, scratch, handler, None
            )
        if not found and status == HS_SUCCESS:
            return []
        hits: list[tuple[int, int]] = found.copy()
        found.clear()
        if status != HS_SUCCESS:
            raise LibhsError(f"hs_scan failed with {status}")
        return hits

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is None:
            return
        try:
            for scratch in self._scratches:
                self._lib.free_scratch(scratch)
            self._lib.free_database(handle)
        except Exception:  # at interpreter exit ctypes may be torn down already
            pass
