"""The one error every schema format raises for a schema the registry must refuse."""


class InvalidSchema(ValueError):
    """An unparsable schema or one that refers to nothing; the message is what the registry's
    42201 error reports."""
