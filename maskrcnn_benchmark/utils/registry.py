from .errors import ConfigError


class UnknownName(ConfigError, KeyError):
    """A config value that names a component no registry holds: bad input (one line, exit 1), and a KeyError
    as a dict's missing key is."""

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class Registry(dict):
    """A name -> callable map used by the builders (``Registry.register("Name")`` as a decorator).

    Every built-in is registered when ``maskrcnn_benchmark.modeling`` is imported (one explicit place, not
    scattered side effects); an unknown name raises :class:`UnknownName` (a ConfigError and a KeyError) that names
    the config key and lists the known names.
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
        raise UnknownName(f"unknown {self.name} '{key}'; known: {', '.join(sorted(self))}")
