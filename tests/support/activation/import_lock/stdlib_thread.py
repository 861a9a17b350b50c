"""A program with no fl_patch call: a thread imports the standard library while megatron imports first.

Run under ``python -m fl_patch`` (fl_patch installs at that first megatron import). Before the
import-lock rule, installing ran inside find_spec, under CPython's global import lock, and
imported the packs there: the thread, holding a module lock and waiting for the global lock,
and the installer, waiting for that module lock, hung forever.
"""

import importlib
import threading

NAMES = [
    "json", "csv", "decimal", "fractions", "statistics", "email.mime.text", "xml.dom.minidom", "http.client",
    "logging.handlers", "sqlite3", "zipfile", "tarfile", "difflib", "pydoc", "unittest.mock", "asyncio",
    "concurrent.futures", "ipaddress", "plistlib", "smtplib", "tomllib", "uuid", "wave", "xmlrpc.client",
]  # fmt: skip


def worker() -> None:
    for name in NAMES:
        importlib.import_module(name)


thread = threading.Thread(target=worker)
thread.start()
import megatron.core  # noqa: E402,F401  (the first megatron import: fl_patch installs here)

thread.join()
print("ok")
