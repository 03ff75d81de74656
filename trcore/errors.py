"""Error types shared by the core and its drivers."""


class ConfigError(ValueError):
    """A configuration value is invalid.

    The message names the field and says what to change; command-line front ends print it as one line
    and exit with status 2.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)  # the args rebuild it: pickling (process pools), SimPy's re-raise
        self.field = field
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


class InfeasibleError(ConfigError):
    """Thresholds that can deadlock the closed system (sum of B_i - 1 >= N)."""


class NotIrreducibleError(RuntimeError):
    """The throughput model's Markov chain has more than one closed class, so no unique stationary law."""


class MemoryInfeasibleError(InfeasibleError):
    """N requests resident on every model they visit need more KV cache than a model holds."""


class ProgramError(RuntimeError):
    """A routing program misbehaved on a step (raised, or returned a verdict that does not fit the batch): the
    step's requests fail, named by the program; the model goes on with the others."""

    def __init__(self, program: str, problem: str) -> None:
        super().__init__(program, problem)
        self.program = program
        self.problem = problem

    def __str__(self) -> str:
        return f"router.{self.program}: {self.problem}"
