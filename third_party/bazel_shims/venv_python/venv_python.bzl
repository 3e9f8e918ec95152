"""A Python toolchain on the project's virtualenv interpreter."""

def _venv_python_impl(repository_ctx):
    workspace = repository_ctx.path(Label("//:WORKSPACE")).dirname
    interpreter = repository_ctx.os.environ.get(
        "JAX_PATCH_PYTHON",
        str(workspace) + "/.venv/bin/python3",
    )
    if not repository_ctx.path(interpreter).exists:
        fail("No Python interpreter at %s: create the virtualenv first " % interpreter +
             "(see README.md) or set JAX_PATCH_PYTHON.")
    repository_ctx.file("BUILD", """
load("@bazel_tools//tools/python:toolchain.bzl", "py_runtime_pair")

py_runtime(
    name = "runtime",
    interpreter_path = "{interpreter}",
    python_version = "PY3",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":runtime",
)

toolchain(
    name = "toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(interpreter = interpreter))

venv_python = repository_rule(
    implementation = _venv_python_impl,
    environ = ["JAX_PATCH_PYTHON"],
    local = True,
)
