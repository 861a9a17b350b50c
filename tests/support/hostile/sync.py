"""Events shared by a module body and a test's threads."""

import threading

entered = threading.Event()
proceed = threading.Event()
