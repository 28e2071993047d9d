"""Convert temperatures between Celsius and Fahrenheit."""

FREEZING_F = 32.0


def to_fahrenheit(celsius):
    return celsius * 9 / 5 + FREEZING_F


def to_celsius(fahrenheit):
    return (fahrenheit - FREEZING_F) * 5 / 9


def describe(celsius):
    fahrenheit = to_fahrenheit(celsius)
    if celsius <= 0:
        return f"{celsius} C ({fahrenheit} F): freezing"
    return f"{celsius} C ({fahrenheit} F)"


def table(start, stop, step):
    rows = []
    for celsius in range(start, stop, step):
        rows.append(describe(celsius))
    return rows
