from fl_patch import register

register("hostile.cycle.a.f", "hostile.cycle.b.g")
register("hostile.cycle.b.g", "hostile.cycle.a.f")
