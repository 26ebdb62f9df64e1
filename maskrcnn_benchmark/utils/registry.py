class Registry(dict):
    """A name -> callable map used by the builders (``Registry.register("Name")`` as a decorator).

    Every built-in is registered when ``maskrcnn_benchmark.modeling`` is imported (one explicit place, not
    scattered side effects); an unknown name raises a KeyError that lists the known ones.
    """

    def __init__(self, name="registry"):
        super().__init__()
        self.name = name

    def register(self, module_name, module=None):
        if module is not None:
            self._add(module_name, module)
            return module

        def decorator(fn):
            self._add(module_name, fn)
            return fn

        return decorator

    def _add(self, module_name, module):
        if module_name in self:
            raise KeyError(f"'{module_name}' is already registered in {self.name}")
        self[module_name] = module

    def __missing__(self, key):
        raise KeyError(f"unknown {self.name} '{key}'; known: {', '.join(sorted(self))}")
