"""A registry module that parses the command line at import (argparse exits on the program's own options)."""

import argparse

from fl_patch import register

register("act_target.mod.greet", "hostile.impls.patched")

parser = argparse.ArgumentParser(description="vendor plugin options")
parser.add_argument("--vendor-device", default="0")
OPTIONS = parser.parse_args()  # the program's --steps 3: "unrecognized arguments", SystemExit(2)
