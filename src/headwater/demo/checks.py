"""What a chapter raises when its answer differs from the one computed in plain Python:
`make demo` then reports it and exits non-zero."""


class CheckFailed(Exception):
    pass
