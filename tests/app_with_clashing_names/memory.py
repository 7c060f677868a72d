"""The application's own memory module: a name agent apps often use."""

NOTES: list[str] = []


def remember(text: str) -> None:
    NOTES.append(text)
