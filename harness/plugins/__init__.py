"""Which samplers take part, and how other people's samplers are loaded.

``implementations`` names them (built-ins and ``--impl`` specs); ``loading`` imports
a plug-in's module from a file or a dotted name; ``sglang_surface`` supplies the
server's ``sglang.*`` import surface where no real ``sglang`` is installed;
``construct`` binds a class against its constructor and builds samplers in its own
calling convention; ``functional`` wraps a block sampler function into a sampler;
``protocol`` writes the contract down as ``typing.Protocol`` classes.
"""
