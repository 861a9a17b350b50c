from fl_patch import register

register("hostile.rw_target.f", "hostile.impls.patched")  # pytest rewrites this module
register("hostile.target.f", "hostile.impls.patched")  # a control: pytest leaves it to the other finders
