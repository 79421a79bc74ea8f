"""Computed templates for the training prompts: math, reasoning and extraction (original, Apache-2.0).

Each ``make`` function draws consistent values from the seeded ``random.Random`` it is given
(word-problem numbers that work out, solvable logic puzzles, short passages to extract from).
"""

from __future__ import annotations

import itertools
import random

from .template import T

NAMES = [
    "Amara",
    "Jonas",
    "Sofia",
    "Kenji",
    "Fatima",
    "Diego",
    "Hannah",
    "Ravi",
    "Chloe",
    "Mateo",
    "Aisha",
    "Oliver",
    "Mei",
    "Samuel",
    "Lucia",
    "Kwame",
    "Elena",
    "Noah",
    "Yusuf",
    "Greta",
    "Tariq",
    "Isabel",
    "Hiro",
    "Nadia",
    "Felix",
    "Leila",
    "Omar",
    "Julia",
    "Arjun",
    "Zoe",
    "Carlos",
    "Marta",
    "Daniel",
    "Sana",
    "Pablo",
    "Freya",
    "Emeka",
    "Rosa",
    "Victor",
    "Anika",
    "Liam",
    "Farah",
    "Theo",
    "Yara",
    "Bruno",
    "Keiko",
    "Dmitri",
    "Alma",
    "Nico",
    "Wanjiru",
]


def _names(r: random.Random, k: int) -> list[str]:
    return r.sample(NAMES, k)


def _money(x: float) -> str:
    return f"{x:,.2f}" if x != int(x) else f"{int(x):,}"


def _lin(a: int, b: int, var: str = "x") -> str:
    """Format a*var + b with tidy signs."""
    head = f"{'' if a == 1 else '-' if a == -1 else a}{var}"
    if b == 0:
        return head
    return f"{head} {'+' if b > 0 else '-'} {abs(b)}"


def _poly(coeffs: list[int]) -> str:
    """Format a polynomial from highest degree down (coeffs[0] is the leading one)."""
    deg = len(coeffs) - 1
    parts: list[str] = []
    for i, c in enumerate(coeffs):
        p = deg - i
        if c == 0:
            continue
        mag = abs(c)
        if p == 0:
            body = f"{mag}"
        elif p == 1:
            body = f"{'' if mag == 1 else mag}x"
        else:
            body = f"{'' if mag == 1 else mag}x^{p}"
        if not parts:
            parts.append(("-" if c < 0 else "") + body)
        else:
            parts.append(("- " if c < 0 else "+ ") + body)
    return " ".join(parts) if parts else "0"


# ======================================================================================== math
def _m_mul(r):
    return {"a": r.randint(112, 989), "b": r.randint(13, 97), "c": r.randint(3, 9)}


def _m_div(r):
    return {"n": r.randint(200, 9999), "d": r.randint(7, 48)}


def _m_pct(r):
    return {"p": r.choice([5, 8, 12, 15, 18, 20, 25, 30, 35, 40, 45, 60, 75]), "n": r.choice(range(40, 2000, 5))}


_PRICED = [
    ("a bus ticket", 2, 5),
    ("a loaf of bread", 2, 6),
    ("a monthly gym membership", 25, 70),
    ("a movie ticket", 8, 18),
    ("a gallon of milk", 3, 6),
    ("a monthly phone plan", 20, 80),
    ("a cup of coffee", 2, 6),
    ("a concert ticket", 40, 150),
    ("a bag of rice", 5, 25),
    ("a pair of running shoes", 60, 160),
    ("a streaming subscription", 6, 20),
]


def _m_change(r):
    item, lo, hi = r.choice(_PRICED)
    old = round(r.uniform(lo, hi), 2)
    new = round(old * r.choice([0.8, 0.85, 0.9, 1.05, 1.1, 1.12, 1.15, 1.2, 1.25, 1.3, 1.4]), 2)
    return {"item": item, "item_cap": item[0].upper() + item[1:], "old": f"{old:.2f}", "new": f"{new:.2f}"}


_GOODS = [
    ("notebooks", 2, 6),
    ("bags of apples", 3, 7),
    ("T-shirts", 8, 20),
    ("packs of batteries", 4, 12),
    ("plant pots", 5, 15),
    ("board games", 15, 45),
    ("pairs of socks", 3, 9),
    ("coffee mugs", 6, 14),
    ("jars of honey", 5, 12),
    ("paint brushes", 2, 8),
    ("bottles of olive oil", 7, 16),
]


def _m_shop(r):
    name = r.choice(NAMES)
    goods, lo, hi = r.choice(_GOODS)
    price = r.randint(lo, hi) + r.choice([0, 0.5, 0.25, 0.99])
    return {
        "name": name,
        "goods": goods,
        "q": r.randint(3, 15),
        "price": _money(price),
        "d": r.choice([5, 10, 15, 20, 25]),
        "tax": r.choice([5, 6, 7, 8, 10]),
    }


_VEHICLES = [
    ("car", 50, 110),
    ("train", 80, 200),
    ("cyclist", 14, 30),
    ("bus", 40, 80),
    ("truck", 55, 90),
    ("motorbike", 50, 120),
]


def _m_speed(r):
    v_name, lo, hi = r.choice(_VEHICLES)
    v = r.randint(lo, hi)
    h = r.choice([2, 3, 4, 5, 1.5, 2.5])
    h2 = r.choice([x for x in (1, 2, 3, 6, 7, 8) if x != h])
    dist = v * h
    return {"vehicle": v_name, "dist": f"{dist:g}", "h": f"{h:g}", "dist2": v * h2}


def _m_meet(r):
    kind, lo, hi = r.choice([("trains", 60, 160), ("cyclists", 12, 30), ("cars", 50, 110), ("hikers", 3, 6)])
    v1, v2 = r.randint(lo, hi), r.randint(lo, hi)
    t = r.choice([1, 1.5, 2, 2.5, 3, 4])
    return {"kind": kind, "v1": v1, "v2": v2, "d": f"{(v1 + v2) * t:g}"}


def _m_work(r):
    n1, n2 = _names(r, 2)
    a, b = r.sample(range(2, 13), 2)
    job = r.choice(
        [
            "paint a fence",
            "mow a large lawn",
            "assemble a bookshelf",
            "clean the whole house",
            "stack a pile of firewood",
            "sort a box of old photos",
        ]
    )
    return {"name": n1, "name2": n2, "a": a, "b": b, "job": job}


def _m_pipe(r):
    a = r.randint(10, 60)
    b = a + r.randint(5, 60)
    return {"a": a, "b": b, "container": r.choice(["tank", "pool", "bathtub", "cistern"])}


def _m_ages(r):
    n1, n2 = _names(r, 2)
    y = r.randint(5, 40)
    d = r.randint(2, 30)
    return {"name": n1, "name2": n2, "s": 2 * y + d, "d": d}


def _m_linear(r):
    x = r.randint(-9, 15)
    a, c = r.sample([2, 3, 4, 5, 6, 7, 8, 9], 2)
    b = r.randint(-20, 20)
    e = (a - c) * x + b
    return {"eq": f"{_lin(a, b)} = {_lin(c, e)}"}


def _m_system(r):
    x, y = r.randint(-6, 9), r.randint(-6, 9)
    while True:
        a, b, d, e = (r.choice([-5, -4, -3, -2, -1, 1, 2, 3, 4, 5]) for _ in range(4))
        if a * e - b * d != 0:
            break

    def side(p, q):
        return f"{_lin(p, 0)} {'+' if q > 0 else '-'} {'' if abs(q) == 1 else abs(q)}y"

    return {"eq1": f"{side(a, b)} = {a * x + b * y}", "eq2": f"{side(d, e)} = {d * x + e * y}"}


def _m_quad(r):
    r1, r2 = r.randint(-9, 9), r.randint(-9, 9)
    k = r.choice([1, 1, 1, 2, 3])
    return {"quad": _poly([k, -k * (r1 + r2), k * r1 * r2])}


def _m_deriv(r):
    coeffs = [r.choice([1, 2, 3, 4, 5, -1, -2]), r.randint(-6, 6), r.randint(-9, 9), r.randint(-9, 9)]
    return {"poly": _poly(coeffs), "x0": r.randint(-3, 4)}


def _m_integral(r):
    coeffs = [r.randint(1, 6), r.randint(-5, 5), r.randint(-8, 8)]
    lo = r.randint(-2, 1)
    return {"poly": _poly(coeffs), "lo": lo, "hi": lo + r.randint(1, 4)}


def _m_circle(r):
    return {
        "thing": r.choice(["garden", "pizza", "pond", "table", "rug", "fountain", "trampoline", "skating rink"]),
        "radius": r.choice([3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 2.5, 4.5]),
        "unit": r.choice(["meters", "feet", "inches", "centimeters"]),
    }


_TRIPLES = [(3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (6, 8, 10), (9, 12, 15), (12, 16, 20), (20, 21, 29)]


def _m_ladder(r):
    a, b, c = r.choice(_TRIPLES)
    k = r.choice([1, 1, 2])
    return {"a": a * k, "c": c * k}


def _m_hyp(r):
    return {"a": r.randint(3, 30), "b": r.randint(3, 30)}


def _m_volume(r):
    return {
        "container": r.choice(["soup can", "water tank", "vase", "candle", "rain barrel", "coffee canister"]),
        "radius": r.randint(3, 40),
        "h": r.randint(8, 120),
    }


def _m_dice(r):
    return {"s": r.randint(2, 12)}


def _m_coins(r):
    n = r.randint(3, 12)
    return {"n": n, "k": r.randint(0, n), "kind": r.choice(["exactly", "at least", "at most"])}


_CARD_EVENTS = [
    "a heart",
    "a face card",
    "an ace or a king",
    "a red card that is not a face card",
    "two aces in a row without replacement",
    "a spade followed by a heart without replacement",
    "a card that is a club or a queen",
    "a number card below 5 (counting aces as 1)",
    "three cards of the same suit when drawing three cards",
    "at least one king in a five-card hand",
]


def _m_cards(r):
    return {"event": r.choice(_CARD_EVENTS)}


def _m_committee(r):
    n = r.randint(7, 25)
    return {
        "n": n,
        "k": r.randint(2, min(6, n - 2)),
        "people": r.choice(["volunteers", "club members", "employees", "students", "nurses", "engineers", "parents"]),
    }


_WORDS = [
    "BANANA",
    "LETTER",
    "MISSISSIPPI",
    "STATISTICS",
    "COMMITTEE",
    "BALLOON",
    "PEPPER",
    "ASSESS",
    "TENNESSEE",
    "APPLE",
    "COFFEE",
    "BOOKKEEPER",
    "SUCCESS",
    "PARALLEL",
    "GOOGOL",
    "REFERENCE",
    "BUBBLE",
    "CANADA",
    "ARRANGE",
    "PUZZLE",
]


def _m_letters(r):
    return {"word": r.choice(_WORDS)}


def _m_stats(r):
    n = r.randint(6, 9)
    nums = [r.randint(2, 60) for _ in range(n - 1)]
    nums.append(r.choice(nums))
    r.shuffle(nums)
    return {"nums": ", ".join(map(str, nums))}


def _m_two(r):
    g = r.choice([2, 3, 4, 5, 6, 7, 8, 9, 12, 14, 15, 18])
    a, b = r.sample(range(2, 40), 2)
    return {"a": a * g, "b": b * g}


def _m_factor(r):
    n = 1
    for _ in range(r.randint(3, 6)):
        n *= r.choice([2, 2, 3, 3, 5, 7, 11, 13])
    return {"n": n}


def _m_isprime(r):
    return {"n": r.randrange(101, 1000, 2)}


def _m_series(r):
    a, d = r.randint(-5, 20), r.randint(2, 9)
    return {"n": r.choice([10, 12, 15, 20, 25, 30, 40, 50]), "t1": a, "t2": a + d, "t3": a + 2 * d}


def _m_frac(r):
    b, d = r.sample([2, 3, 4, 5, 6, 7, 8, 9, 10, 12], 2)
    return {"a": r.randint(1, b - 1), "b": b, "c": r.randint(1, d - 1), "d": d}


def _m_simple_interest(r):
    return {
        "P": f"{r.choice(range(500, 20001, 250)):,}",
        "rate": r.choice([1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6]),
        "t": r.randint(2, 10),
    }


def _m_compound(r):
    return {
        "P": f"{r.choice(range(1000, 50001, 500)):,}",
        "rate": r.choice([2, 3, 3.5, 4.5, 5, 6, 7]),
        "t": r.randint(3, 25),
    }


_CONVERSIONS = [
    ("miles", "kilometers"),
    ("kilograms", "pounds"),
    ("degrees Fahrenheit", "degrees Celsius"),
    ("liters", "US gallons"),
    ("feet", "meters"),
    ("cups", "milliliters"),
    ("ounces", "grams"),
    ("miles per hour", "kilometers per hour"),
    ("acres", "hectares"),
    ("inches", "centimeters"),
    ("square feet", "square meters"),
    ("kilometers", "miles"),
    ("degrees Celsius", "degrees Fahrenheit"),
    ("pounds", "kilograms"),
    ("meters per second", "kilometers per hour"),
    ("tablespoons", "teaspoons"),
    ("nautical miles", "kilometers"),
    ("gigabytes", "megabytes"),
    ("hours", "seconds"),
    ("yards", "meters"),
    ("cubic meters", "liters"),
    ("fluid ounces", "milliliters"),
]


def _m_convert(r):
    src, dst = r.choice(_CONVERSIONS)
    return {
        "x": r.choice([2.5, 3, 5, 7.5, 12, 18, 26.2, 42, 60, 72, 100, 150, 250, 350, 1000, 0.75, 37]),
        "u_from": src,
        "u_to": dst,
    }


def _m_recipe(r):
    ing, unit = r.choice(
        [
            ("flour", "cups"),
            ("sugar", "grams"),
            ("butter", "tablespoons"),
            ("milk", "milliliters"),
            ("rice", "cups"),
            ("olive oil", "tablespoons"),
            ("oats", "grams"),
            ("chicken stock", "cups"),
        ]
    )
    n, m = r.sample([2, 3, 4, 6, 8, 10, 12], 2)
    q = (
        r.choice([0.5, 0.75, 1, 1.5, 2, 3, 120, 200, 250, 400])
        if unit not in ("grams", "milliliters")
        else r.choice([100, 150, 200, 250, 300, 400, 500])
    )
    return {"ing": ing, "unit": unit, "n": n, "m": m, "q": f"{q:g}"}


def _m_fuel(r):
    return {
        "l": r.choice([4.5, 5.2, 5.8, 6.4, 7, 7.5, 8.3, 9.1]),
        "d": r.choice(range(120, 1600, 40)),
        "p": f"{r.uniform(1.2, 2.2):.2f}",
    }


def _m_overtime(r):
    return {
        "name": r.choice(NAMES),
        "w": r.choice([14, 15.5, 16, 18, 19.75, 21, 22.5, 25, 28, 32]),
        "h": r.randint(42, 58),
    }


def _m_tip(r):
    return {"bill": f"{r.uniform(45, 420):.2f}", "t": r.choice([10, 12, 15, 18, 20, 22]), "n": r.randint(2, 8)}


def _m_paint(r):
    return {"area": r.randint(28, 140), "cov": r.choice([8, 9, 10, 11, 12]), "v": r.choice([1, 2.5, 4, 5])}


def _m_save(r):
    goal = r.choice(range(600, 12001, 100))
    return {
        "goal": f"{goal:,}",
        "have": f"{r.choice(range(0, goal // 2, 50)):,}",
        "m": r.randint(4, 24),
        "thing": r.choice(
            [
                "a new laptop",
                "a trip to Japan",
                "a used car",
                "a family vacation",
                "a new bike",
                "a down payment on a scooter",
                "a camera",
                "emergency savings",
            ]
        ),
    }


def _m_expo(r):
    b = r.randint(2, 7)
    k = r.randint(2, 6 if b < 4 else 4)
    c = r.randint(1, 3)
    return {"b": b, "v": b**k, "c": c, "v2": b ** (k + c)}


def _m_det(r):
    vals = [r.randint(-6, 9) for _ in range(4)]
    return {"m": f"[[{vals[0]}, {vals[1]}], [{vals[2]}, {vals[3]}]]"}


def _m_det3(r):
    rows = [[r.randint(-4, 6) for _ in range(3)] for _ in range(3)]
    return {"m": "[" + ", ".join("[" + ", ".join(map(str, row)) + "]" for row in rows) + "]"}


def _m_class(r):
    n = r.choice([20, 24, 25, 28, 30, 32, 36, 40, 120, 200, 250])
    p = r.choice([p for p in range(50, 100, 5) if (n * p) % 100 == 0] or [50])
    return {"n": n, "p": p, "subject": r.choice(["history", "chemistry", "driving", "piano", "swimming", "math"])}


def _m_movie(r):
    h, m = r.randint(1, 11), r.choice(range(0, 60, 5))
    return {"start": f"{h}:{m:02d} {r.choice(['a.m.', 'p.m.'])}", "d": r.randint(85, 195)}


def _m_roundtrip(r):
    v1, v2 = r.sample([30, 40, 45, 50, 60, 70, 75, 80, 90, 100], 2)
    return {
        "v1": v1,
        "v2": v2,
        "place": r.choice(["parents' house", "office", "cabin", "friend's farm", "grandmother's village"]),
    }


def _m_mixture(r):
    while True:
        p1, p3, p2 = sorted(r.sample([5, 10, 15, 20, 25, 30, 40, 50, 60], 3), reverse=True)
        v = r.choice([2, 3, 4, 5, 6, 8, 10, 12, 20])
        x = v * (p3 - p2) / (p1 - p3)
        if x == int(x) and x > 0:
            return {
                "p1": p1,
                "p2": p2,
                "p3": p3,
                "v": v,
                "sub": r.choice(["salt solution", "sugar syrup", "alcohol solution", "acid solution"]),
            }


def _m_limit(r):
    a, c = r.randint(1, 9), r.randint(1, 9)
    return {"num": _poly([a, 0, r.randint(-9, 9)]), "den": _poly([c, -r.randint(1, 9), 0]), "k": r.randint(2, 9)}


def _m_avg_needed(r):
    name = r.choice(NAMES)
    s = [r.randint(62, 95) for _ in range(3)]
    target = (sum(s) + r.randint(70, 100)) // 4
    return {"name": name, "s1": s[0], "s2": s[1], "s3": s[2], "target": target}


def _m_ratio(r):
    n1, n2 = _names(r, 2)
    a, b = r.sample([1, 2, 3, 4, 5, 7], 2)
    return {"name": n1, "name2": n2, "a": a, "b": b, "total": f"{(a + b) * r.randint(20, 400):,}"}


def _m_nth_term(r):
    a, d = r.randint(-10, 30), r.choice([-7, -4, -3, 2, 3, 5, 6, 11])
    return {"t1": a, "t2": a + d, "t3": a + 2 * d, "n": r.choice([15, 20, 25, 50, 100])}


def _m_drip(r):
    return {"drops": r.randint(6, 40), "ml": r.choice([0.05, 0.04, 0.1, 0.06])}


def _m_temps(r):
    city = r.choice(["Oslo", "Denver", "Nairobi", "Lima", "Perth", "Toronto", "Madrid", "Osaka"])
    temps = [r.randint(-5, 31) for _ in range(7)]
    return {"city": city, "temps": ", ".join(f"{t}°C" for t in temps)}


MATH_TEMPLATES: list[T] = [
    T("m_mul", "math", "What is {a} × {b}? Please show the steps.", ("Now multiply that result by {c}.",), 9, _m_mul),
    T("m_mul_b", "math", "Calculate {a} times {b} without a calculator and explain your method.", (), 5, _m_mul),
    T(
        "m_div",
        "math",
        "Divide {n} by {d} and round the answer to two decimal places.",
        ("What are the quotient and remainder of {n} divided by {d} using whole-number division?",),
        6,
        _m_div,
    ),
    T("m_pct", "math", "What is {p}% of {n}?", ("And what is {n} increased by {p}%?",), 7, _m_pct),
    T(
        "m_change",
        "math",
        "{item_cap} used to cost ${old} and now costs ${new}. By what percentage did the price change?",
        (),
        6,
        _m_change,
    ),
    T(
        "m_shop",
        "math",
        "{name} buys {q} {goods} at ${price} each and gets a {d}% discount on the total. How much does {name} pay?",
        ("If {tax}% sales tax is added after the discount, what does {name} pay in total?",),
        9,
        _m_shop,
    ),
    T(
        "m_speed",
        "math",
        "A {vehicle} travels {dist} km in {h} hours. What is its average speed, and how long would it take to cover {dist2} km at that speed?",
        (),
        6,
        _m_speed,
    ),
    T(
        "m_meet",
        "math",
        "Two {kind} start {d} km apart at the same moment and head toward each other at {v1} km/h and {v2} km/h. When do they meet, and how far has each one gone?",
        (),
        6,
        _m_meet,
    ),
    T(
        "m_work",
        "math",
        "{name} can {job} in {a} hours, and {name2} can do it in {b} hours. How long will it take if they work together?",
        (),
        6,
        _m_work,
    ),
    T(
        "m_pipe",
        "math",
        "One pipe fills a {container} in {a} minutes, and a drain empties the full {container} in {b} minutes. If both are open, how long does it take to fill the empty {container}?",
        (),
        5,
        _m_pipe,
    ),
    T(
        "m_ages",
        "math",
        "The sum of {name}'s and {name2}'s ages is {s}, and {name} is {d} years older than {name2}. How old is each of them?",
        (),
        5,
        _m_ages,
    ),
    T("m_linear", "math", "Solve for x: {eq}", (), 6, _m_linear),
    T(
        "m_linear_b",
        "math",
        "Find the value of x that satisfies {eq}, and check your answer by substituting it back.",
        (),
        5,
        _m_linear,
    ),
    T("m_system", "math", "Solve the system of equations: {eq1} and {eq2}.", (), 6, _m_system),
    T(
        "m_quad",
        "math",
        "Find the roots of {quad} = 0.",
        ("Where is the vertex of the parabola y = {quad}?",),
        7,
        _m_quad,
    ),
    T(
        "m_deriv",
        "math",
        "Differentiate f(x) = {poly}.",
        ("Evaluate that derivative at x = {x0} for f(x) = {poly}.",),
        7,
        _m_deriv,
    ),
    T(
        "m_crit",
        "math",
        "Find the critical points of f(x) = {poly} and classify each one as a local maximum or minimum.",
        (),
        5,
        _m_deriv,
    ),
    T("m_integral", "math", "Evaluate the definite integral of {poly} from x = {lo} to x = {hi}.", (), 6, _m_integral),
    T(
        "m_circle",
        "math",
        "A circular {thing} has a radius of {radius} {unit}. What are its area and circumference?",
        (),
        6,
        _m_circle,
    ),
    T(
        "m_ladder",
        "math",
        "A {c}-foot ladder leans against a wall with its base {a} feet from the wall. How high up the wall does it reach?",
        (),
        5,
        _m_ladder,
    ),
    T(
        "m_hyp",
        "math",
        "A right triangle has legs of {a} cm and {b} cm. How long is the hypotenuse, rounded to one decimal place?",
        (),
        5,
        _m_hyp,
    ),
    T(
        "m_volume",
        "math",
        "What is the volume of a cylindrical {container} with a radius of {radius} cm and a height of {h} cm? Give the answer in liters as well.",
        (),
        6,
        _m_volume,
    ),
    T(
        "m_dice",
        "math",
        "What is the probability of rolling a total of {s} with two fair six-sided dice?",
        (),
        5,
        _m_dice,
    ),
    T(
        "m_coins",
        "math",
        "If you flip a fair coin {n} times, what is the probability of getting {kind} {k} heads?",
        (),
        7,
        _m_coins,
    ),
    T(
        "m_cards",
        "math",
        "From a well-shuffled standard 52-card deck, what is the probability of drawing {event}?",
        (),
        5,
        _m_cards,
    ),
    T(
        "m_committee",
        "math",
        "How many different committees of {k} can be chosen from {n} {people}?",
        (
            "How many ways are there if one of the {k} members on the committee from {n} {people} must also be named chair?",
        ),
        7,
        _m_committee,
    ),
    T(
        "m_letters",
        "math",
        "How many distinct arrangements are there of the letters in the word {word}?",
        (),
        6,
        _m_letters,
    ),
    T(
        "m_stats",
        "math",
        "Find the mean, median and mode of these numbers: {nums}.",
        ("What are the range and the standard deviation of {nums}?",),
        7,
        _m_stats,
    ),
    T("m_lcm", "math", "What is the least common multiple of {a} and {b}?", (), 5, _m_two),
    T("m_gcd", "math", "Find the greatest common divisor of {a} and {b}, and show your steps.", (), 5, _m_two),
    T("m_factor", "math", "What is the prime factorization of {n}?", (), 5, _m_factor),
    T("m_isprime", "math", "Is {n} a prime number? Explain how you checked.", (), 5, _m_isprime),
    T(
        "m_series",
        "math",
        "What is the sum of the first {n} terms of the arithmetic sequence {t1}, {t2}, {t3}, ...?",
        (),
        5,
        _m_series,
    ),
    T(
        "m_nth",
        "math",
        "Find the {n}th term of the sequence {t1}, {t2}, {t3}, ... and write a general formula for it.",
        (),
        5,
        _m_nth_term,
    ),
    T(
        "m_frac",
        "math",
        "Add {a}/{b} and {c}/{d}, and simplify the result.",
        ("Now multiply {a}/{b} by {c}/{d} instead.",),
        6,
        _m_frac,
    ),
    T(
        "m_simple",
        "math",
        "If I deposit ${P} at {rate}% simple interest per year, how much interest will I earn in {t} years?",
        (),
        5,
        _m_simple_interest,
    ),
    T(
        "m_compound",
        "math",
        "How much will ${P} grow to after {t} years at {rate}% annual interest compounded monthly?",
        (),
        5,
        _m_compound,
    ),
    T(
        "m_convert",
        "math",
        "Convert {x} {u_from} to {u_to}.",
        ("Now convert {x} {u_to} back into {u_from}.",),
        9,
        _m_convert,
    ),
    T(
        "m_convert_b",
        "math",
        "How many {u_to} are in {x} {u_from}? Show the conversion factor you used.",
        (),
        7,
        _m_convert,
    ),
    T(
        "m_recipe",
        "math",
        "A recipe that serves {n} calls for {q} {unit} of {ing}. How much {ing} do I need to serve {m}?",
        (),
        6,
        _m_recipe,
    ),
    T(
        "m_fuel",
        "math",
        "My car uses {l} liters of fuel per 100 km. How much fuel does a {d} km trip need, and what will it cost at ${p} per liter?",
        (),
        5,
        _m_fuel,
    ),
    T(
        "m_overtime",
        "math",
        "{name} earns ${w} an hour, with time-and-a-half for every hour over 40 in a week. How much does {name} earn for working {h} hours in one week?",
        (),
        5,
        _m_overtime,
    ),
    T(
        "m_tip",
        "math",
        "Our dinner bill is ${bill}. We want to leave a {t}% tip and split the total equally among {n} people. How much does each person pay?",
        (),
        5,
        _m_tip,
    ),
    T(
        "m_paint",
        "math",
        "The walls of a room add up to {area} square meters. One liter of paint covers {cov} square meters, and we want two coats. How many {v}-liter cans should we buy?",
        (),
        5,
        _m_paint,
    ),
    T(
        "m_save",
        "math",
        "I want to save ${goal} for {thing} in {m} months, and I already have ${have}. How much should I put aside each month?",
        (),
        5,
        _m_save,
    ),
    T("m_expo", "math", "Solve for x: {b}^x = {v}.", ("Now solve {b}^(x + {c}) = {v2}.",), 5, _m_expo),
    T(
        "m_det",
        "math",
        "Find the determinant of the matrix {m}.",
        ("Is the matrix {m} invertible? If so, find its inverse.",),
        5,
        _m_det,
    ),
    T("m_det3", "math", "Compute the determinant of the 3x3 matrix {m} using cofactor expansion.", (), 5, _m_det3),
    T(
        "m_class",
        "math",
        "In a {subject} class of {n} students, {p}% passed the final exam. How many students did not pass?",
        (),
        5,
        _m_class,
    ),
    T("m_movie", "math", "A movie starts at {start} and runs for {d} minutes. What time does it end?", (), 5, _m_movie),
    T(
        "m_roundtrip",
        "math",
        "I drive to my {place} at {v1} km/h and come back along the same road at {v2} km/h. What is my average speed for the whole round trip?",
        (),
        5,
        _m_roundtrip,
    ),
    T(
        "m_mixture",
        "math",
        "How many liters of a {p1}% {sub} must be mixed with {v} liters of a {p2}% {sub} to get a {p3}% {sub}?",
        (),
        5,
        _m_mixture,
    ),
    T(
        "m_limit",
        "math",
        "Find the limit as x approaches infinity of ({num}) / ({den}).",
        ("And what is the limit of sin({k}x)/x as x approaches 0?",),
        5,
        _m_limit,
    ),
    T(
        "m_avg",
        "math",
        "{name} scored {s1}, {s2} and {s3} on three tests. What score does {name} need on the fourth test to average {target}?",
        (),
        5,
        _m_avg_needed,
    ),
    T(
        "m_ratio",
        "math",
        "Split ${total} between {name} and {name2} in the ratio {a}:{b}. How much does each person get?",
        (),
        5,
        _m_ratio,
    ),
    T(
        "m_drip",
        "math",
        "A leaky tap drips {drops} times a minute, and each drop is about {ml} mL. Roughly how many liters does it waste in a year?",
        (),
        5,
        _m_drip,
    ),
    T(
        "m_temps",
        "math",
        "The daily high temperatures in {city} last week were {temps}. What were the mean and median temperatures?",
        (),
        5,
        _m_temps,
    ),
]

# =================================================================================== reasoning
_ORDER_RELATIONS = [
    ("{a} is taller than {b}.", "the tallest", "the shortest"),
    ("{a} is older than {b}.", "the oldest", "the youngest"),
    ("{a} runs faster than {b}.", "the fastest runner", "the slowest runner"),
    ("{a} scored higher than {b} on the quiz.", "the top scorer", "the lowest scorer"),
    ("{a} arrived at the party before {b}.", "the first to arrive", "the last to arrive"),
    ("{a} lives farther from the office than {b}.", "the one who lives farthest away", "the one who lives closest"),
    ("{a} earns more than {b}.", "the highest earner", "the lowest earner"),
    ("{a} finished the puzzle sooner than {b}.", "the quickest solver", "the slowest solver"),
]


def _r_order(r):
    n = r.choice([3, 4, 4, 5])
    people = _names(r, n)
    rel, top, bottom = r.choice(_ORDER_RELATIONS)
    facts = [rel.format(a=people[i], b=people[i + 1]) for i in range(n - 1)]
    r.shuffle(facts)
    q = r.choice(
        [
            f"Who is {top}?",
            f"Who is {bottom}?",
            "List everyone in order, and explain how you worked it out.",
            f"Who is second from the top, and who is {bottom}?",
            f"Is {people[-1]} ahead of {people[0]} in this ranking? Explain.",
        ]
    )
    return {"facts": " ".join(facts), "q": q}


# Knights always tell the truth, knaves always lie. Statements are functions of (speaker, other).
_KK_STATEMENTS = [
    ("{o} is a knave.", lambda s, o: not o),
    ("{o} is a knight.", lambda s, o: o),
    ("We are both knights.", lambda s, o: s and o),
    ("We are both knaves.", lambda s, o: (not s) and (not o)),
    ("At least one of us is a knave.", lambda s, o: (not s) or (not o)),
    ("{o} and I are the same kind.", lambda s, o: s == o),
    ("{o} and I are different kinds.", lambda s, o: s != o),
    ("I am a knave or {o} is a knight.", lambda s, o: (not s) or o),
    ("Exactly one of us is a knight.", lambda s, o: s != o),
]


def _r_knights(r):
    a, b = _names(r, 2)
    while True:
        sa = r.choice(_KK_STATEMENTS)
        sb = r.choice(_KK_STATEMENTS + [None])
        sols = []
        for ta, tb in itertools.product([True, False], repeat=2):
            ok = sa[1](ta, tb) == ta
            if sb is not None:
                ok = ok and (sb[1](tb, ta) == tb)
            if ok:
                sols.append((ta, tb))
        if len(sols) == 1:
            break
    said = f'{a} says, "{sa[0].format(o=b)}"'
    if sb is not None:
        said += f' {b} says, "{sb[0].format(o=a)}"'
    return {"a": a, "b": b, "said": said}


_SYL_SETS = [
    ("roses", "flowers", "plants"),
    ("sparrows", "birds", "animals"),
    ("squares", "rectangles", "quadrilaterals"),
    ("poodles", "dogs", "mammals"),
    ("oaks", "trees", "plants"),
    ("electricians", "tradespeople", "workers"),
    ("sedans", "cars", "vehicles"),
    ("novels", "books", "publications"),
    ("salmon", "fish", "vertebrates"),
    ("laptops", "computers", "machines"),
    ("sonnets", "poems", "works of literature"),
    ("tulips", "flowers", "plants"),
    ("surgeons", "doctors", "medical professionals"),
    ("penguins", "birds", "animals"),
    ("lemons", "citrus fruits", "fruits"),
]
_SYL_ADJ = ["red", "expensive", "imported", "very old", "on sale", "tiny", "brightly colored", "rare", "damaged"]


def _r_syllogism(r):
    a, b, c = r.choice(_SYL_SETS)
    adj = r.choice(_SYL_ADJ)
    form = r.choice(
        [
            f"All {a} are {b}, and all {b} are {c}. Does it follow that all {a} are {c}?",
            f"All {a} are {b}. Some {b} are {adj}. Can we conclude that some {a} are {adj}?",
            f"Some {a} are {adj}, and all {a} are {b}. Is it true that some {b} are {adj}?",
            f"All {a} are {b}. No {b} are {adj}. Can any {a} be {adj}?",
            f"Every one of the {a} in the shop is {adj}. Some {b} in the shop are not {adj}. What can we say about those {b}?",
        ]
    )
    return {"syl": form}


_CONDITIONALS = [
    (
        "If it rains on Saturday, the picnic will be moved indoors.",
        "It rained on Saturday.",
        "It did not rain on Saturday.",
        "The picnic was moved indoors.",
        "The picnic was not moved indoors.",
    ),
    (
        "If the fire alarm sounds, everyone leaves the building.",
        "The fire alarm sounded.",
        "The fire alarm did not sound.",
        "Everyone left the building.",
        "Not everyone left the building.",
    ),
    (
        "If a number is divisible by 6, it is divisible by 3.",
        "The number n is divisible by 6.",
        "The number n is not divisible by 6.",
        "The number n is divisible by 3.",
        "The number n is not divisible by 3.",
    ),
    (
        "If the shop is open, its lights are on.",
        "The shop is open.",
        "The shop is closed.",
        "The lights are on.",
        "The lights are off.",
    ),
    (
        "If Hiro studies tonight, he will pass the exam.",
        "Hiro studied tonight.",
        "Hiro did not study tonight.",
        "Hiro passed the exam.",
        "Hiro failed the exam.",
    ),
    (
        "If a plant gets no water, it wilts.",
        "The basil got no water.",
        "The basil got water.",
        "The basil wilted.",
        "The basil did not wilt.",
    ),
    (
        "If the password is correct, the door unlocks.",
        "The password was correct.",
        "The password was wrong.",
        "The door unlocked.",
        "The door stayed locked.",
    ),
    (
        "If the battery is dead, the car won't start.",
        "The battery is dead.",
        "The battery is fine.",
        "The car won't start.",
        "The car started.",
    ),
    (
        "If it is a public holiday, the post office is closed.",
        "Today is a public holiday.",
        "Today is not a public holiday.",
        "The post office is closed today.",
        "The post office is open today.",
    ),
    (
        "If milk is left out overnight, it goes sour.",
        "The milk was left out overnight.",
        "The milk was kept in the fridge.",
        "The milk went sour.",
        "The milk did not go sour.",
    ),
]


def _r_conditional(r):
    rule, p, not_p, q, not_q = r.choice(_CONDITIONALS)
    return {"rule": rule, "fact": r.choice([p, not_p, q, not_q])}


_ODD_GROUPS = {
    "fruit": ["apple", "banana", "cherry", "grape", "mango", "pear", "plum", "kiwi"],
    "vegetable": ["carrot", "broccoli", "spinach", "potato", "onion", "cabbage", "leek"],
    "planet": ["Mars", "Venus", "Jupiter", "Saturn", "Mercury", "Uranus"],
    "metal": ["iron", "copper", "silver", "zinc", "lead", "tin", "aluminum"],
    "mammal": ["whale", "bat", "horse", "dolphin", "tiger", "rabbit", "otter"],
    "bird": ["eagle", "sparrow", "ostrich", "parrot", "heron", "owl", "swan"],
    "country": ["Peru", "Kenya", "Norway", "Vietnam", "Chile", "Egypt", "Canada"],
    "shape": ["triangle", "hexagon", "circle", "square", "pentagon", "rhombus"],
    "programming language": ["Python", "Rust", "Haskell", "Ruby", "Kotlin", "Perl"],
    "tree": ["birch", "maple", "willow", "cedar", "elm", "spruce"],
}


def _r_odd(r):
    g1, g2 = r.sample(sorted(_ODD_GROUPS), 2)
    words = r.sample(_ODD_GROUPS[g1], 4) + [r.choice(_ODD_GROUPS[g2])]
    r.shuffle(words)
    return {"words": ", ".join(words)}


def _r_sequence(r):
    kind = r.choice(["arith", "geom", "square", "fib", "alt", "tri", "diffs"])
    a = r.randint(1, 12)
    if kind == "arith":
        d = r.randint(2, 13)
        seq = [a + i * d for i in range(5)]
    elif kind == "geom":
        q = r.randint(2, 4)
        seq = [a * q**i for i in range(5)]
    elif kind == "square":
        c = r.randint(-3, 5)
        seq = [(i + a) ** 2 + c for i in range(5)]
    elif kind == "fib":
        b = r.randint(1, 9)
        seq = [a, b]
        for _ in range(4):
            seq.append(seq[-1] + seq[-2])
    elif kind == "alt":
        d1, d2 = r.randint(2, 9), r.randint(1, 5)
        seq = [a]
        for i in range(5):
            seq.append(seq[-1] + (d1 if i % 2 == 0 else -d2))
    elif kind == "tri":
        seq = [a + i * (i + 1) // 2 for i in range(6)]
    else:
        d, dd = r.randint(1, 5), r.randint(1, 4)
        seq = [a]
        for i in range(5):
            seq.append(seq[-1] + d + i * dd)
    return {"seq": ", ".join(map(str, seq))}


_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _r_weekday(r):
    return {"wd": r.choice(_WEEKDAYS), "n": r.randint(10, 1000)}


def _r_months(r):
    m1, m2 = r.sample(
        ["February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"],
        2,
    )
    return {"wd": r.choice(_WEEKDAYS), "m1": m1, "m2": m2}


def _r_walk(r):
    a, b, _ = r.choice(_TRIPLES[:6])
    k = r.choice([1, 2, 3])
    north = a * k + (south := r.randint(1, 6))
    name = r.choice(NAMES)
    return {"name": name, "north": north, "east": b * k, "south": south, "unit": r.choice(["km", "blocks", "miles"])}


_KIN = [
    "my mother's brother's son",
    "my father's sister's husband",
    "my brother's daughter's son",
    "my grandmother's only daughter's son",
    "my mother's mother's husband",
    "my sister's husband's sister",
    "my father's only son's wife",
    "my aunt's father's wife",
    "my cousin's mother's mother",
    "the only son of my father's only brother",
    "my husband's brother's wife",
    "my daughter's son's sister",
    "my grandfather's son who is not my father",
    "my mother's daughter who is not my sister",
]


_FALLACIES = [
    "Millions of people believe this diet works, so it must be effective.",
    "My grandfather smoked every day and lived to 95, so smoking can't be that bad.",
    "If we allow students to redo one test, soon they'll expect to redo every assignment and grades will mean nothing.",
    "You can't trust his argument about climate policy because he drives a big car.",
    "Either you support this new highway or you don't care about the economy.",
    "The new mayor took office in January and crime fell in February, so the mayor reduced crime.",
    "This shampoo is natural, so it must be safe.",
    "Nobody has proven that ghosts don't exist, so they must be real.",
    "A famous actor says this vitamin cured his fatigue, so it will cure mine.",
    "We've always closed the shop on Mondays, so we should keep doing it.",
    "Since the study was funded by a company, everything in it is false.",
    "My opponent wants to cut the military budget, so he wants to leave the country defenseless.",
    "Every swan I've ever seen is white, so all swans are white.",
    "The restaurant is expensive, so the food must be excellent.",
    "I lost my keys after a black cat crossed my path, so black cats bring bad luck.",
    "Ninety percent of car accidents happen within 25 km of home, so it's safer to drive far away.",
    "If you really loved me, you'd agree with everything I say.",
    "This app has a five-star rating from its three users, so it's the best app in its category.",
    "The team has lost five games in a row, so they're bound to win the next one.",
    "Everyone in my office uses this brand of laptop, so it must be the best.",
]

_FERMI = [
    "piano tuners work in a city of three million people",
    "golf balls would fit in a school bus",
    "liters of water a person drinks in a lifetime",
    "words are in a typical 300-page novel",
    "slices of pizza are eaten in the United States each day",
    "heartbeats a person has in a lifetime",
    "trees there are in a large city park",
    "grains of rice are in a one-kilogram bag",
    "books a public library lends in a year",
    "steps it would take to walk across a country like France",
    "cups of coffee are sold at a busy airport each day",
    "hairs are on a human head",
    "bicycles there are in Amsterdam",
    "emails are sent worldwide every second",
    "teachers work in a country of 50 million people",
    "leaves there are on a mature oak tree",
]

_OBSERVATIONS = [
    "A café's sales of iced drinks doubled in a month when the weather did not change.",
    "A town's library saw visits rise sharply right after it removed late fees.",
    "Students who sit in the front row get better grades on average.",
    "A website's sign-ups dropped by half the day after a redesign.",
    "Houses near a new train line went up in price before the line was built.",
    "A bakery sells out of bread every Tuesday but has leftovers every Thursday.",
    "Fewer people were treated for sunburn in a summer with record heat.",
    "A factory's output went up after the lights were made brighter, and again when they were dimmed.",
    "People who own dogs report exercising more than people who own cats.",
    "An online shop gets most of its returns on Mondays.",
    "A hospital with the best doctors also has a higher death rate than its neighbors.",
    "Ice cream sales and drowning incidents rise and fall together over the year.",
    "A city's reported bike thefts doubled right after it launched an online reporting form.",
    "The tallest students in a primary school have the best reading scores.",
    "A restaurant that raised its prices got more customers, not fewer.",
    "Every plant on one side of a greenhouse is taller than the same plants on the other side.",
]

_COUNTERFACTUALS = [
    "the Moon were twice as close to Earth",
    "humans could photosynthesize like plants",
    "the internet had never been invented",
    "everyone spoke the same language",
    "Earth's day lasted 30 hours instead of 24",
    "money were abolished overnight",
    "cars had never replaced horses",
    "people needed only two hours of sleep a night",
    "all ocean water suddenly became fresh water",
    "the wheel had never been invented",
    "everyone could read each other's thoughts",
    "electricity cost nothing",
    "a country moved all its schools online permanently",
    "bees disappeared worldwide",
    "humans lived to 200 years on average",
    "gravity on Earth were 10% weaker",
]

_PROFILES = [
    (
        "is 31, outspoken and very bright. She majored in environmental science and volunteers for conservation groups",
        "works at a bank",
        "volunteers at a wildlife rescue on weekends",
    ),
    (
        "is quiet, orderly and loves detail. He keeps a neat spreadsheet of his book collection",
        "is a farmer",
        "keeps a spreadsheet of his crops",
    ),
    (
        "spent her twenties backpacking and speaks four languages",
        "is an accountant",
        "organizes trips for her colleagues",
    ),
    ("is energetic, loves performing and sang in every school musical", "is a pharmacist", "sings in a local choir"),
    (
        "tinkers with electronics and builds robots in his garage",
        "is a history teacher",
        "runs the school's robotics club",
    ),
    (
        "reads philosophy for fun and writes long letters to newspapers",
        "is a truck driver",
        "writes a blog about ethics",
    ),
]


def _r_conjunction(r):
    desc, job, extra = r.choice(_PROFILES)
    name = r.choice(NAMES)
    return {"name": name, "desc": desc, "job": job, "extra": extra}


_TASKS = [
    ("answer urgent client emails", 30),
    ("prepare slides for tomorrow's meeting", 90),
    ("pick up a prescription", 20),
    ("do the weekly grocery shopping", 60),
    ("review a colleague's report", 45),
    ("call the plumber", 10),
    ("go to the gym", 60),
    ("finish a tax form due today", 40),
    ("cook dinner for guests arriving at 7", 75),
    ("walk the dog", 25),
    ("submit a job application that closes at 5 p.m.", 50),
    ("clean the kitchen", 30),
]


def _r_prioritize(r):
    tasks = r.sample(_TASKS, r.randint(4, 6))
    hours = r.choice([3, 4, 5])
    listing = "; ".join(f"{t} ({m} min)" for t, m in tasks)
    return {"tasks": listing, "hours": hours}


REASONING_TEMPLATES: list[T] = [
    T("r_order", "reasoning", "{facts} {q}", (), 30, _r_order),
    T(
        "r_knights",
        "reasoning",
        "On an island, knights always tell the truth and knaves always lie. You meet {a} and {b}. {said} What is each of them?",
        (),
        30,
        _r_knights,
    ),
    T("r_syllogism", "reasoning", "{syl} Explain your reasoning.", (), 30, _r_syllogism),
    T(
        "r_conditional",
        "reasoning",
        "Rule: {rule} Fact: {fact} What, if anything, can we conclude? Say whether the inference is valid.",
        (),
        25,
        _r_conditional,
    ),
    T("r_odd", "reasoning", "Which one is the odd one out: {words}? Explain why.", (), 22, _r_odd),
    T(
        "r_sequence",
        "reasoning",
        "What number comes next in this sequence: {seq}, ...? Explain the pattern.",
        ("Make up a new sequence that follows a similar kind of rule to {seq}, and give its next term.",),
        24,
        _r_sequence,
    ),
    T(
        "r_weekday",
        "reasoning",
        "If today is {wd}, what day of the week will it be {n} days from now?",
        (),
        15,
        _r_weekday,
    ),
    T(
        "r_weekday_b",
        "reasoning",
        "If today is {wd}, what day of the week was it {n} days ago? Explain the shortcut you use.",
        (),
        10,
        _r_weekday,
    ),
    T(
        "r_months",
        "reasoning",
        "In a non-leap year, {m1} 1st falls on a {wd}. What day of the week is {m2} 1st?",
        (),
        15,
        _r_months,
    ),
    T(
        "r_walk",
        "reasoning",
        "{name} walks {north} {unit} north, then {east} {unit} east, then {south} {unit} south. How far is {name} from the starting point in a straight line, and in which general direction?",
        (),
        15,
        _r_walk,
    ),
    T(
        "r_kin",
        "reasoning",
        "How is {kin} related to me? If there is more than one possible answer, list them.",
        (),
        14,
        None,
    ),
    T(
        "r_fallacy",
        "reasoning",
        'What is wrong with this reasoning, if anything? "{fallacy}"',
        ('Rewrite the argument "{fallacy}" so that it becomes reasonable.',),
        20,
        None,
    ),
    T(
        "r_fermi",
        "reasoning",
        "Roughly how many {fermi}? Walk me through your estimate step by step.",
        ("Redo the estimate of how many {fermi}, this time giving a low and a high bound.",),
        16,
        None,
    ),
    T(
        "r_observe",
        "reasoning",
        "Give at least three possible explanations for this observation, and say how you'd test them: {observation}",
        ('Which explanation for this do you find most likely, and why? "{observation}"',),
        16,
        None,
    ),
    T(
        "r_counterfactual",
        "reasoning",
        "What would happen if {counterfactual}? Think through the consequences step by step.",
        ("In a world where {counterfactual}, which change would ordinary people notice first?",),
        16,
        None,
    ),
    T(
        "r_conjunction",
        "reasoning",
        "{name} {desc}. Which is more likely: (a) {name} {job}, or (b) {name} {job} and {extra}? Explain.",
        (),
        10,
        _r_conjunction,
    ),
    T(
        "r_prioritize",
        "reasoning",
        "I have {hours} hours this afternoon and these tasks: {tasks}. I can't do them all. Which should I do, in what order, and why?",
        (),
        20,
        _r_prioritize,
    ),
]
REASONING_SLOTS = {
    "kin": _KIN,
    "fallacy": _FALLACIES,
    "fermi": _FERMI,
    "observation": _OBSERVATIONS,
    "counterfactual": _COUNTERFACTUALS,
}

# ================================================================================== extraction
_TEAMS = ["marketing", "platform", "design", "finance", "support", "mobile", "research", "operations"]
_ACTIONS = [
    "send the revised budget to the client",
    "update the onboarding guide",
    "book a room for the workshop",
    "review the vendor contract",
    "fix the login bug on Android",
    "draft the press release",
    "collect feedback from the pilot users",
    "order new laptops for the interns",
    "schedule the user interviews",
    "clean up the shared drive",
    "prepare the quarterly report",
    "test the new checkout flow",
    "contact the venue about catering",
    "write the FAQ for the launch",
    "migrate the old database",
]
_DATES = [
    "March 3",
    "March 10",
    "April 2",
    "April 15",
    "May 6",
    "May 20",
    "June 1",
    "June 12",
    "July 8",
    "August 19",
    "September 4",
    "October 21",
    "November 9",
    "December 2",
]


def _x_meeting(r):
    people = _names(r, 4)
    acts = r.sample(_ACTIONS, 4)
    dates = r.sample(_DATES, 3)
    team = r.choice(_TEAMS)
    passage = (
        f"Notes from the {team} team sync: {people[0]} will {acts[0]} by {dates[0]}. "
        f"{people[1]} agreed to {acts[1]} before {dates[1]}. {people[2]} is still waiting on legal, "
        f"so the task to {acts[2]} moves to {dates[2]}. {people[3]} offered to {acts[3]} but gave no date."
    )
    return {"passage": passage, "p0": people[0]}


_REVIEW_POS = [
    "Works exactly as described and arrived two days early.",
    "Honestly the best {p} I've owned.",
    "Sturdy, well made, and my kids love it.",
    "Great value for the price, would buy again.",
    "Setup took five minutes and it has worked perfectly since.",
]
_REVIEW_NEG = [
    "Stopped working after a week.",
    "The {p} looks nothing like the photos.",
    "Customer support ignored my three emails.",
    "Cheap materials, and it arrived scratched.",
    "Way too loud and the battery barely lasts an hour.",
]
_REVIEW_MIX = [
    "It does the job, but the instructions are confusing.",
    "Looks nice, though it's smaller than I expected.",
    "Fine for the price. Nothing special.",
    "The {p} is good, but shipping took a month.",
]
_REVIEW_PRODUCTS = [
    "blender",
    "desk lamp",
    "phone case",
    "yoga mat",
    "coffee grinder",
    "kids' scooter",
    "electric kettle",
    "bike lock",
    "travel pillow",
    "garden hose",
    "air purifier",
    "rice cooker",
]


def _x_reviews(r):
    p = r.choice(_REVIEW_PRODUCTS)
    pool = [s for s in _REVIEW_POS + _REVIEW_NEG + _REVIEW_MIX]
    picks = r.sample(pool, r.randint(3, 5))
    lines = "\n".join(f'{i + 1}. "{s.format(p=p)}"' for i, s in enumerate(picks))
    return {"product": p, "reviews": lines}


_SHOP_ITEMS = [
    ("wireless mouse", 24.99),
    ("USB-C cable", 9.5),
    ("notebook set", 12.0),
    ("desk plant", 18.75),
    ("phone stand", 15.2),
    ("HDMI adapter", 19.99),
    ("mechanical pencil", 4.25),
    ("laptop sleeve", 29.0),
    ("water bottle", 21.5),
    ("sticky notes", 6.4),
    ("headphone hook", 11.0),
    ("cable organizer", 8.99),
]


def _x_order(r):
    items = r.sample(_SHOP_ITEMS, r.randint(2, 4))
    qtys = [r.randint(1, 4) for _ in items]
    total = sum(q * p for (_, p), q in zip(items, qtys, strict=True))
    order_id = f"{r.choice('ABCDEFGHJKLMNPQRSTUVWXYZ')}{r.randint(10000, 99999)}"
    name = r.choice(NAMES)
    lines = "; ".join(f"{q} x {n} at ${p:.2f}" for (n, p), q in zip(items, qtys, strict=True))
    passage = (
        f"Hi {name}, thanks for shopping with us! Your order #{order_id} has shipped. It contains: {lines}. "
        f"Shipping was free, so your total is ${total:.2f}. Expect delivery within {r.randint(2, 7)} business days."
    )
    return {"passage": passage, "order_id": order_id}


_COMPANIES = [
    "Brightwater Labs",
    "Kestrel Logistics",
    "Maple & Finch Design",
    "Northwind Solar",
    "Tidewell Health",
    "Quarry Street Games",
    "Silverpine Analytics",
    "Copperleaf Foods",
    "Bluestone Learning",
    "Orchid Robotics",
]
_CITIES = ["Denver", "Lyon", "Toronto", "Nairobi", "Melbourne", "Austin", "Glasgow", "Porto", "Osaka", "Montevideo"]
_REQS = [
    "two years of experience with Python",
    "a driver's license",
    "fluency in Spanish",
    "experience with Figma",
    "a nursing certification",
    "strong Excel skills",
    "experience managing budgets",
    "familiarity with SQL",
    "excellent written communication",
    "willingness to travel 20% of the time",
]


def _x_job(r):
    company, city = r.choice(_COMPANIES), r.choice(_CITIES)
    title = r.choice(
        [
            "data analyst",
            "office manager",
            "product designer",
            "field technician",
            "content writer",
            "account executive",
            "clinical coordinator",
            "backend developer",
        ]
    )
    lo = r.choice(range(38, 110, 4)) * 1000
    reqs = r.sample(_REQS, 3)
    passage = (
        f"{company} is hiring a {title} to join our {city} office ({r.choice(['hybrid', 'on-site', 'remote-friendly'])}). "
        f"Pay: ${lo:,}-${lo + r.choice([8, 10, 15, 20]) * 1000:,} a year. You should have {reqs[0]}, {reqs[1]} "
        f"and {reqs[2]}. Apply by {r.choice(_DATES)}."
    )
    return {"passage": passage, "company": company, "title": title}


_HOODS = ["Riverside", "Old Town", "Hillcrest", "the Arts District", "Northgate", "Harbor View", "Elm Park"]


def _x_apartment(r):
    beds = r.randint(1, 4)
    rent = r.choice(range(900, 4200, 50))
    passage = (
        f"Sunny {beds}-bedroom apartment in {r.choice(_HOODS)}, {r.randint(45, 140)} square meters on the "
        f"{r.choice(['2nd', '3rd', '4th', '7th', 'top'])} floor. ${rent:,} per month plus utilities. "
        f"{r.choice(['Cats allowed, no dogs.', 'Pets welcome.', 'No pets.', 'Small dogs allowed with deposit.'])} "
        f"{r.choice(['Parking included.', 'Street parking only.', 'Garage space for $120 extra.'])} "
        f"Available from {r.choice(_DATES)}."
    )
    return {"passage": passage}


def _x_event(r):
    host = r.choice(NAMES)
    ev = r.choice(
        [
            "potluck dinner",
            "book launch",
            "charity quiz night",
            "garden party",
            "retirement celebration",
            "board game marathon",
            "alumni reunion",
            "open studio afternoon",
        ]
    )
    venue = r.choice(
        [
            "the Greenway Community Hall",
            "Café Lumen",
            "the rooftop of 12 Carver Street",
            "Lakeside Pavilion",
            "the back room of The Copper Kettle pub",
            "Studio 9 on Mill Lane",
        ]
    )
    passage = (
        f"You're invited! Join {host} for a {ev} on {r.choice(_WEEKDAYS)}, {r.choice(_DATES)} from "
        f"{r.randint(1, 8)}:{r.choice(['00', '30'])} p.m. at {venue}. Please RSVP by {r.choice(_DATES)} "
        f"to {host.lower()}@example.com. {r.choice(['Bring a dish to share.', 'Dress code: casual.', 'Kids welcome.', 'Free parking on site.'])}"
    )
    return {"passage": passage, "ev": ev}


_CLUBS = [
    "Riverton Rovers",
    "Ashford United",
    "Port Selby FC",
    "Kingsbridge Athletic",
    "Millbrook Town",
    "Eastvale City",
]


def _x_match(r):
    home, away = r.sample(_CLUBS, 2)
    scorers = _names(r, 4)
    hs, as_ = r.randint(0, 3), r.randint(0, 3)
    minutes = sorted(r.sample(range(3, 90), hs + as_))
    events = []
    for i, m in enumerate(minutes):
        team = home if i < hs else away
        events.append(f"{r.choice(scorers)} scored for {team} in the {m}th minute")
    r.shuffle(events)
    body = ". ".join(events) + "." if events else "Neither side found the net."
    passage = (
        f"{home} hosted {away} on Saturday in front of {r.randint(2, 30) * 1000:,} fans. {body} "
        f"{r.choice(scorers)} was shown a yellow card just before half-time."
    )
    return {"passage": passage}


def _x_weather(r):
    cities = r.sample(_CITIES, 4)
    parts = []
    for c in cities:
        hi = r.randint(-2, 34)
        parts.append(
            f"{c} can expect a high of {hi}°C and a low of {hi - r.randint(4, 12)}°C with "
            f"{r.choice(['sunshine', 'light rain', 'thunderstorms', 'fog in the morning', 'snow showers', 'clouds'])}"
        )
    return {"passage": "Tomorrow's forecast: " + "; ".join(parts) + "."}


def _x_contacts(r):
    people = _names(r, 3)
    bits = []
    for p in people:
        bits.append(
            r.choice(
                [
                    f"{p} (cell 555-01{r.randint(10, 99)}, {p.lower()}@example.org)",
                    f"you can reach {p} at {p.lower()}.{r.choice(['k', 'm', 'r'])}@example.net or on 555-02{r.randint(10, 99)}",
                    f"{p}'s number is 555-03{r.randint(10, 99)}; email {p.lower()}{r.randint(1, 99)}@example.com",
                ]
            )
        )
    return {"passage": "Contacts for the volunteer day: " + "; ".join(bits) + "."}


_EXPENSES = [
    ("train ticket", "travel"),
    ("hotel night", "lodging"),
    ("team lunch", "meals"),
    ("taxi", "travel"),
    ("coffee with client", "meals"),
    ("printer paper", "supplies"),
    ("conference pass", "events"),
    ("airport parking", "travel"),
    ("dinner", "meals"),
    ("USB drives", "supplies"),
]


def _x_expenses(r):
    items = r.sample(_EXPENSES, r.randint(4, 6))
    text = ", ".join(f"{n} ${r.randint(8, 260)}.{r.choice(['00', '50', '25', '99'])}" for n, _ in items)
    return {"expenses": text}


def _x_bio(r):
    name = r.choice(NAMES)
    born = r.randint(1920, 1985)
    y1 = born + r.randint(18, 24)
    y2 = y1 + r.randint(2, 9)
    y3 = y2 + r.randint(3, 12)
    field = r.choice(["marine biologist", "architect", "jazz pianist", "civil engineer", "novelist", "pediatrician"])
    passage = (
        f"{name} {r.choice(['Alvarez', 'Okoro', 'Lindqvist', 'Tanaka', 'Moreau', 'Haddad'])} was born in "
        f"{r.choice(_CITIES)} in {born}. After studying in {r.choice(_CITIES)}, {name} became a {field} in {y1}. "
        f"In {y2} {name} moved abroad, and in {y3} won a national award. {name} retired in {y3 + r.randint(5, 20)}."
    )
    return {"passage": passage}


# Hand-written passages used with generic extraction instructions (tags say which instructions fit).
PASSAGES: list[tuple[frozenset, str]] = [
    (
        frozenset({"people", "dates", "numbers"}),
        "On 12 April 2021, the Westbrook city council approved a plan to convert 40 parking spaces on Elm Street into a "
        "pedestrian plaza. Councillor Dana Whitfield, who proposed the plan, said construction would start in June and "
        "cost about $1.2 million. Local shop owner Raj Patel opposed it, arguing that his customers need parking.",
    ),
    (
        frozenset({"numbers", "steps"}),
        "To repot a houseplant, water it a day before. Choose a pot 2 to 5 centimeters wider than the old one. Add a "
        "layer of fresh soil, ease the plant out, loosen the roots gently, place it in the new pot and fill around it. "
        "Water thoroughly and keep it out of direct sun for about a week.",
    ),
    (
        frozenset({"people", "dates"}),
        "The Harrow Valley Music Festival returns on 18-20 July. Headliners include the folk duo Juniper & Ash and "
        "the string quartet The Wren Ensemble, with a late-night set by DJ Mira Sol on the Saturday. Early-bird "
        "tickets go on sale on 1 March.",
    ),
    (
        frozenset({"numbers", "sentiment"}),
        "I stayed at the Pinecrest Lodge for three nights. The room was spotless and the breakfast buffet had at least "
        "20 options, but the Wi-Fi only worked in the lobby and the walls were so thin I could hear my neighbor's TV. "
        "At $140 a night, it was decent value.",
    ),
    (
        frozenset({"people", "numbers", "dates"}),
        "In 1998, engineers Lena Brandt and Kofi Mensah founded Tessellate, a small firm that designed bridge sensors. "
        "By 2010 it employed 350 people in four countries. In 2016 it was acquired by a larger infrastructure company "
        "for a reported 480 million euros.",
    ),
    (
        frozenset({"numbers", "steps"}),
        "Our return policy: items can be returned within 30 days of delivery if unused and in original packaging. "
        "Start a return from your account page, print the prepaid label, and drop the parcel at any post office. "
        "Refunds are issued within 5 to 7 business days after we receive the item. Sale items can only be exchanged.",
    ),
    (
        frozenset({"numbers"}),
        "The survey asked 1,200 adults how they commute. 46% drive alone, 18% take public transport, 14% walk, 9% "
        "cycle, 8% work from home full time, and the remaining 5% carpool. Cycling was most common among people aged "
        "25 to 34.",
    ),
    (
        frozenset({"people", "sentiment"}),
        "Dear Ms. Romero, I'm writing to say how grateful we are for your son's teacher, Mr. Ellison. Since September "
        "he has stayed after school twice a week to help the robotics club, and our daughter now talks about becoming "
        "an engineer. Please pass on our thanks. Warm regards, the Nakamura family.",
    ),
    (
        frozenset({"dates", "numbers"}),
        "The Hollis Bridge was closed on 3 February after inspectors found cracks in two support beams. Repairs began "
        "on 14 March and are expected to take 11 weeks. During the closure, buses 12 and 47 are being rerouted via "
        "Canal Road, adding about 15 minutes to each trip.",
    ),
    (
        frozenset({"people", "numbers"}),
        "The three finalists for the science prize were Ama Owusu, who built a low-cost water filter from sand and "
        "charcoal; Jakub Nowak, who trained a model to count birds in photos with 94% accuracy; and Sienna Clarke, who "
        "measured microplastics in 30 local streams. Owusu won the $5,000 first prize.",
    ),
    (
        frozenset({"sentiment"}),
        "The new city library is beautiful, with huge windows and comfortable chairs, but it closes at 6 p.m., which "
        "makes it useless for anyone who works during the day. The children's section is wonderful. The café, on the "
        "other hand, is overpriced and always out of sandwiches.",
    ),
    (
        frozenset({"numbers", "steps"}),
        "To make cold brew, combine 100 grams of coarsely ground coffee with 1 liter of cold water in a jar. Stir, "
        "cover and leave it in the fridge for 12 to 18 hours. Strain through a paper filter, then dilute it with an "
        "equal amount of water or milk before serving. It keeps for about two weeks.",
    ),
    (
        frozenset({"people", "dates", "numbers"}),
        "Flight attendant-turned-novelist Grace Imani published her first book, The Salt Road, in March 2019. It sold "
        "60,000 copies in its first year. Her second novel, Lanterns, followed in October 2022 and was shortlisted for "
        "the Coastline Prize, which was won that year by Tomás Reyes.",
    ),
    (
        frozenset({"sentiment", "numbers"}),
        "Quarterly update: revenue grew 12% to $8.4 million, driven by strong sales of our garden tools. However, "
        "shipping costs rose 20% and we lost our second-largest retail customer. We remain cautiously optimistic "
        "about the holiday season.",
    ),
]

_PASSAGE_INSTRUCTIONS = [
    (
        "people",
        'List every person mentioned in the text below, with their role or what they did, as a JSON array of objects with "name" and "role".',
    ),
    ("people", "Who are the people in this text and how are they connected? Answer in a short bulleted list."),
    ("dates", "Extract all dates from the passage and the events associated with them, in chronological order."),
    ("dates", "Build a timeline from this text. Return a markdown table with columns Date and Event."),
    ("numbers", "Pull out every number in the text and say what it refers to. Format the answer as a JSON object."),
    ("numbers", "Put the key figures from this passage into a two-column markdown table (Item, Value)."),
    ("steps", "Turn the following text into a numbered list of steps."),
    ("steps", "Extract the instructions from this text as a JSON array of short step strings."),
    (
        "sentiment",
        "Is the overall tone of this text positive, negative or mixed? Quote the phrases that support your answer.",
    ),
    ("sentiment", "List the positives and the negatives mentioned in this text in two separate lists."),
    ("", "Give me a one-sentence summary of this text, then three keywords."),
    ("", "Write three quiz questions, with answers, based only on the following text."),
]


def _x_passage(r):
    tags, text = r.choice(PASSAGES)
    instr = r.choice([i for tag, i in _PASSAGE_INSTRUCTIONS if not tag or tag in tags])
    return {"instr": instr, "passage": text}


EXTRACTION_TEMPLATES: list[T] = [
    T(
        "x_meeting",
        "extraction",
        "Extract the action items from these meeting notes as a JSON list of objects with the keys owner, task and due_date (use null when there is no date).\n\n{passage}",
        ("Which of those tasks belong to {p0}, and which task has no deadline?",),
        22,
        _x_meeting,
    ),
    T(
        "x_meeting_b",
        "extraction",
        "Who is responsible for what in the notes below? Answer as a markdown table.\n\n{passage}",
        (),
        14,
        _x_meeting,
    ),
    T(
        "x_reviews",
        "extraction",
        "Classify each of these {product} reviews as positive, negative or mixed, and return a JSON object that maps the review number to its label.\n\n{reviews}",
        ("Summarize the main complaint about the {product} in one sentence.",),
        24,
        _x_reviews,
    ),
    T(
        "x_order",
        "extraction",
        "Extract the order number, each item with its quantity and unit price, and the total from this email. Return JSON.\n\n{passage}",
        ("From order {order_id}, which item cost the most in total (quantity times price)?",),
        24,
        _x_order,
    ),
    T(
        "x_job",
        "extraction",
        "Extract the job title, company, city, salary range, requirements and application deadline from this posting as JSON.\n\n{passage}",
        ("Which of the {title} requirements at {company} would be easiest to learn on the job?",),
        22,
        _x_job,
    ),
    T(
        "x_apartment",
        "extraction",
        "Put the key details of this listing into a markdown table (bedrooms, size, floor, rent, pets, parking, available from).\n\n{passage}",
        (),
        20,
        _x_apartment,
    ),
    T(
        "x_event",
        "extraction",
        "From this invitation, extract event, date, time, location, RSVP deadline and contact as JSON.\n\n{passage}",
        ("Write a short calendar entry title for the {ev} based on that invitation.",),
        20,
        _x_event,
    ),
    T(
        "x_match",
        "extraction",
        "From this match report, list each goal with the scorer, team and minute, and give the final score.\n\n{passage}",
        (),
        20,
        _x_match,
    ),
    T(
        "x_weather",
        "extraction",
        "Convert this forecast into CSV with the columns city, high_c, low_c and conditions.\n\n{passage}",
        (),
        18,
        _x_weather,
    ),
    T(
        "x_contacts",
        "extraction",
        "Turn these messy contact details into a clean table with Name, Phone and Email columns.\n\n{passage}",
        (),
        18,
        _x_contacts,
    ),
    T(
        "x_expenses",
        "extraction",
        "Here are my expenses from a work trip: {expenses}. Group them into categories (travel, lodging, meals, supplies, events) and return JSON with the total per category.",
        (),
        18,
        _x_expenses,
    ),
    T(
        "x_bio",
        "extraction",
        "Extract a timeline from this short biography as a JSON array of objects with year and event.\n\n{passage}",
        (),
        18,
        _x_bio,
    ),
    T("x_passage", "extraction", "{instr}\n\n{passage}", (), 60, _x_passage),
]

# ======================================================================================== stem
_MOVERS = [
    ("bowling ball", 5, 9),
    ("cyclist with her bike", 70, 95),
    ("small car", 900, 1400),
    ("tennis ball", 0.057, 0.06),
    ("sprinter", 60, 90),
    ("shopping cart", 15, 40),
    ("delivery drone", 2, 8),
]


def _s_kinetic(r):
    obj, lo, hi = r.choice(_MOVERS)
    m = round(r.uniform(lo, hi), 3 if hi < 1 else 0)
    return {"obj": obj, "m": f"{m:g}", "v": r.choice([2, 3, 5, 8, 10, 12, 15, 20, 25, 30, 45])}


def _s_ohm(r):
    return {"R": r.choice([10, 22, 47, 100, 220, 330, 470, 1000, 2200]), "V": r.choice([1.5, 3, 5, 9, 12, 24])}


def _s_radio(r):
    band = r.choice(["FM", "AM"])
    f = f"{r.uniform(88, 108):.1f} MHz" if band == "FM" else f"{r.choice(range(540, 1700, 10))} kHz"
    return {"band": band, "f": f}


def _s_ph(r):
    return {
        "c": r.choice(["0.1", "0.01", "0.001", "0.05", "0.002", "0.0005", "0.2"]),
        "acid": r.choice(["hydrochloric acid", "nitric acid"]),
    }


def _s_gas(r):
    return {
        "V": r.choice([1, 2, 5, 10, 22.4, 25, 50]),
        "n": r.choice([0.5, 1, 1.5, 2, 3, 4]),
        "T": r.choice([273, 298, 300, 350, 400, 500]),
    }


def _s_heat(r):
    t1 = r.randint(5, 30)
    return {"m": r.choice([0.25, 0.5, 1, 1.5, 2, 5]), "t1": t1, "t2": r.choice([40, 60, 80, 100])}


def _s_collision(r):
    return {"m1": r.randint(1, 12), "v1": r.randint(1, 9), "m2": r.randint(1, 12)}


def _s_pendulum(r):
    return {
        "L": r.choice([0.25, 0.5, 0.75, 1, 1.5, 2, 3, 10]),
        "where": r.choice(["on Earth", "on the Moon (g = 1.62 m/s^2)", "on Mars (g = 3.71 m/s^2)"]),
    }


def _s_punnett(r):
    trait = r.choice(
        [
            ("tall (T)", "short (t)", "T"),
            ("purple flowers (P)", "white flowers (p)", "P"),
            ("round seeds (R)", "wrinkled seeds (r)", "R"),
            ("brown fur (B)", "white fur (b)", "B"),
        ]
    )
    big, small = trait[2], trait[2].lower()
    g = [f"homozygous dominant ({big}{big})", f"heterozygous ({big}{small})", f"homozygous recessive ({small}{small})"]
    g1, g2 = r.choice(g), r.choice(g)
    return {
        "dom": trait[0],
        "rec": trait[1],
        "g1": g1,
        "g2": g2,
        "organism": "guinea pigs" if big == "B" else "pea plants",
    }


def _s_halflife(r):
    iso, hl, unit = r.choice(
        [
            ("iodine-131", 8, "days"),
            ("carbon-14", 5730, "years"),
            ("radon-222", 3.8, "days"),
            ("cobalt-60", 5.3, "years"),
            ("technetium-99m", 6, "hours"),
            ("strontium-90", 29, "years"),
        ]
    )
    k = r.choice([2, 3, 4, 5])
    return {"iso": iso, "hl": f"{hl:g}", "unit": unit, "m": r.choice([10, 16, 40, 80, 100, 200]), "t": f"{hl * k:g}"}


def _s_density(r):
    return {
        "m": r.choice(range(20, 900, 7)),
        "v": r.choice(range(10, 400, 3)),
        "obj": r.choice(["block of wood", "metal cube", "plastic toy", "stone", "candle", "cork stopper"]),
    }


STEM_TEMPLATES: list[T] = [
    T("s_kinetic", "stem", "What is the kinetic energy of a {m} kg {obj} moving at {v} m/s?", (), 12, _s_kinetic),
    T(
        "s_ohm",
        "stem",
        "A {R}-ohm resistor is connected across a {V} V battery. What current flows, and how much power does the resistor dissipate?",
        (),
        12,
        _s_ohm,
    ),
    T(
        "s_radio",
        "stem",
        "An {band} radio station broadcasts at {f}. What is the wavelength of its signal?",
        (),
        10,
        _s_radio,
    ),
    T("s_ph", "stem", "What is the pH of a {c} M solution of {acid}? Explain the assumption you make.", (), 8, _s_ph),
    T(
        "s_gas",
        "stem",
        "A {V} L container holds {n} mol of an ideal gas at {T} K. What is the pressure in kilopascals?",
        (),
        10,
        _s_gas,
    ),
    T("s_heat", "stem", "How much energy does it take to heat {m} kg of water from {t1}°C to {t2}°C?", (), 10, _s_heat),
    T(
        "s_collision",
        "stem",
        "A {m1} kg cart moving at {v1} m/s hits a {m2} kg cart at rest and they stick together. How fast do they move afterwards, and how much kinetic energy is lost?",
        (),
        10,
        _s_collision,
    ),
    T("s_pendulum", "stem", "What is the period of a simple pendulum {L} m long {where}?", (), 10, _s_pendulum),
    T(
        "s_punnett",
        "stem",
        "In {organism}, {dom} is dominant over {rec}. If you cross a {g1} parent with a {g2} parent, what proportions of genotypes and phenotypes do you expect?",
        (),
        10,
        _s_punnett,
    ),
    T(
        "s_halflife",
        "stem",
        "{iso} has a half-life of {hl} {unit}. How much of a {m} g sample is left after {t} {unit}?",
        (),
        10,
        _s_halflife,
    ),
    T(
        "s_density",
        "stem",
        "A {obj} has a mass of {m} g and a volume of {v} cm^3. What is its density, and would it sink or stay on top in fresh water?",
        (),
        10,
        _s_density,
    ),
]

SUMMARY_TEMPLATES: list[T] = [
    T(
        "w_summary",
        "writing",
        "Summarize this passage in two sentences for {summary_audience}:\n\n{passage}",
        (),
        20,
        lambda r: {"passage": r.choice(PASSAGES)[1]},
    ),
]

GEN_TEMPLATES = MATH_TEMPLATES + REASONING_TEMPLATES + EXTRACTION_TEMPLATES + STEM_TEMPLATES + SUMMARY_TEMPLATES
