"""Build hook for the compiled record codec; everything else about the package is in pyproject.toml.

``pip install`` (wheel or editable) compiles ``tiering/codec/_speedups.c`` into
``tierlog.tiering.codec._speedups``, ``service/rest_v2/_restjson.c`` (the REST records array's text) into
``tierlog.service.rest_v2._restjson`` and ``client/_sendlane.c`` (the producer's ``send`` fast path) into
``tierlog.client._sendlane``, with the CPython C API: no Cython, nothing beyond gcc (or any C compiler) and
the Python headers. Where no compiler works the build still succeeds, without the extension,
and the codec falls back to pure Python with a one-line warning at import (see
``tierlog.tiering.codec._accel`` and docs/design/0009-compiled-codec.md).
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):  # type: ignore[misc]
    """Build the extension when a compiler works; otherwise warn in one line and ship pure Python."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # distutils raises unrelated kinds: PlatformError, CCompilerError ...
            self._skip(err)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:
            self._skip(err)

    @staticmethod
    def _skip(err: Exception) -> None:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        message = f"WARNING: tierlog: not building the compiled codec ({reason}); using pure Python"
        print(message, file=sys.stderr)


setup(
    ext_modules=[
        Extension(
            "tierlog.tiering.codec._speedups",
            sources=["tiering/codec/_speedups.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
        ),
        Extension(
            "tierlog.service.rest_v2._restjson",
            sources=["service/rest_v2/_restjson.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
        ),
        Extension(
            "tierlog.client._sendlane",
            sources=["client/_sendlane.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall"],
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
