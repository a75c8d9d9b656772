"""tap.py - the TAP lines the install suite's Python tests print (meson counts them)."""


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def check(self, cond, what, *details):
        self.n += 1
        if cond:
            print(f"ok {self.n} - {what}")
        else:
            self.failed += 1
            print(f"not ok {self.n} - {what}")
            for d in details:
                for line in str(d).splitlines():
                    print(f"#   {line}")
        return cond
