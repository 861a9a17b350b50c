"""An impl module that needs a vendor SDK which is not installed here."""

import act_vendor_sdk_not_installed  # noqa: F401


def farewell(name):
    return name
