from fl_patch import register

register("hostile.selfreg.target.f", "hostile.impls.patched")
