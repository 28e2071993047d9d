import math


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius ** 2

    def perimeter(self):
        return 2 * math.pi * self.radius


class Rectangle:
    def __init__(self, width, height):
        self.width = width
        self.height = height

    def area(self):
        return self.width * self.height

    def perimeter(self):
        return 2 * (self.width + self.height)


def largest(shapes):
    return max(shapes, key=lambda shape: shape.area())


def describe(shape):
    name = type(shape).__name__
    return f"{name} with area {shape.area():.2f} and perimeter {shape.perimeter():.2f}"


if __name__ == "__main__":
    shapes = [Circle(1.0), Rectangle(2.0, 3.0), Circle(0.5)]
    print(describe(largest(shapes)))
