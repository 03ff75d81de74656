"""Writes trserve/data/prompts/eval_qa_candidates.jsonl: the hand-written candidate questions (capitals, basic
facts) and seeded arithmetic from which ``tokenrouter quality build-set`` keeps those the large model answers
right. Run: ``.venv/bin/python scripts/eval_qa_candidates.py``."""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "trserve" / "data" / "prompts" / "eval_qa_candidates.jsonl"

# France is left out: "What is the capital of France?" is a routing (training) prompt and the demo's question.
CAPITALS = {
    "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon", "Japan": "Tokyo",
    "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Greece": "Athens", "Austria": "Vienna",
    "Ireland": "Dublin", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki", "Denmark": "Copenhagen",
    "Poland": "Warsaw", "Hungary": "Budapest", "the Czech Republic": "Prague", "Belgium": "Brussels",
    "the Netherlands": "Amsterdam", "Switzerland": "Bern", "Canada": "Ottawa", "Mexico": "Mexico City",
    "Argentina": "Buenos Aires", "Peru": "Lima", "Chile": "Santiago", "Colombia": "Bogota", "Cuba": "Havana",
    "India": "New Delhi", "Thailand": "Bangkok", "South Korea": "Seoul", "Vietnam": "Hanoi",
    "Indonesia": "Jakarta", "the Philippines": "Manila", "Kenya": "Nairobi", "Nigeria": "Abuja",
    "Ethiopia": "Addis Ababa", "Turkey": "Ankara", "Iran": "Tehran", "Iraq": "Baghdad", "Saudi Arabia": "Riyadh",
    "Israel": "Jerusalem", "Australia": "Canberra", "New Zealand": "Wellington", "Ukraine": "Kyiv",
    "Romania": "Bucharest", "Bulgaria": "Sofia", "Serbia": "Belgrade", "Croatia": "Zagreb", "Iceland": "Reykjavik",
    "the United Kingdom": "London", "England": "London", "Scotland": "Edinburgh", "the United States": "Washington",
    "Brazil": "Brasilia", "Venezuela": "Caracas", "Pakistan": "Islamabad", "Afghanistan": "Kabul",
    "Malaysia": "Kuala Lumpur", "Singapore": "Singapore", "Morocco": "Rabat", "Algeria": "Algiers",
    "Tunisia": "Tunis", "Ghana": "Accra", "Uganda": "Kampala", "Lebanon": "Beirut", "Syria": "Damascus",
    "Jordan": "Amman", "Nepal": "Kathmandu", "Bangladesh": "Dhaka", "Sri Lanka": "Colombo", "Mongolia": "Ulaanbaatar",
    "Latvia": "Riga", "Lithuania": "Vilnius", "Estonia": "Tallinn", "Slovakia": "Bratislava", "Slovenia": "Ljubljana",
    "Luxembourg": "Luxembourg", "Qatar": "Doha", "Cambodia": "Phnom Penh", "Laos": "Vientiane",
    "Ecuador": "Quito", "Bolivia": "La Paz", "Uruguay": "Montevideo", "Paraguay": "Asuncion", "Jamaica": "Kingston",
    "Zimbabwe": "Harare", "Zambia": "Lusaka", "Senegal": "Dakar", "Sudan": "Khartoum", "Libya": "Tripoli",
    "Albania": "Tirana", "Belarus": "Minsk", "Georgia": "Tbilisi", "Armenia": "Yerevan", "Cyprus": "Nicosia",
    "Malta": "Valletta", "Panama": "Panama City", "Costa Rica": "San Jose",
}  # fmt: skip

FACTS = [
    ("How many legs does a spider have?", ["eight", "8"]),
    ("How many legs does an insect have?", ["six", "6"]),
    ("How many days are in a week?", ["seven", "7"]),
    ("How many months are in a year?", ["twelve", "12"]),
    ("How many hours are in a day?", ["24", "twenty-four", "twenty four"]),
    ("How many minutes are in an hour?", ["60", "sixty"]),
    ("How many seconds are in a minute?", ["60", "sixty"]),
    ("How many continents are there?", ["seven", "7"]),
    ("How many sides does a triangle have?", ["three", "3"]),
    ("How many sides does a square have?", ["four", "4"]),
    ("How many sides does a hexagon have?", ["six", "6"]),
    ("How many sides does an octagon have?", ["eight", "8"]),
    ("How many days are in a leap year?", ["366"]),
    ("How many planets are in the solar system?", ["eight", "8"]),
    ("How many colors are in a rainbow?", ["seven", "7"]),
    ("How many strings does a standard guitar have?", ["six", "6"]),
    ("How many players are on a soccer team on the field?", ["eleven", "11"]),
    ("What is the chemical symbol for water?", ["h2o"]),
    ("What is the chemical symbol for gold?", ["au"]),
    ("What is the chemical symbol for oxygen?", ["o"]),
    ("What gas do plants absorb from the air?", ["carbon dioxide", "co2"]),
    ("What gas do humans need to breathe?", ["oxygen"]),
    ("What is the freezing point of water in Celsius?", ["0", "zero"]),
    ("What is the boiling point of water in Celsius?", ["100"]),
    ("What is the closest star to Earth?", ["sun"]),
    ("What planet is known as the Red Planet?", ["mars"]),
    ("What is the third planet from the Sun?", ["earth"]),
    ("What is the smallest planet in the solar system?", ["mercury"]),
    ("What planet has the most famous rings?", ["saturn"]),
    ("What is the natural satellite of the Earth called?", ["moon"]),
    ("What is the largest ocean on Earth?", ["pacific"]),
    ("What is the largest desert in the world?", ["sahara", "antarctic", "antarctica"]),
    ("What is the longest river in Africa?", ["nile"]),
    ("What is the tallest mountain in the world?", ["everest"]),
    ("What is the largest country in the world by area?", ["russia"]),
    ("What is the largest continent?", ["asia"]),
    ("What is the largest mammal?", ["blue whale", "whale"]),
    ("What is the fastest land animal?", ["cheetah"]),
    ("What is the tallest animal?", ["giraffe"]),
    ("What animal is known as the king of the jungle?", ["lion"]),
    ("What do bees produce?", ["honey"]),
    ("What do cows drink?", ["water"]),
    ("What animal says moo?", ["cow"]),
    ("What animal barks?", ["dog"]),
    ("What is a baby cat called?", ["kitten"]),
    ("What is a baby dog called?", ["puppy", "pup"]),
    ("What is a young frog called?", ["tadpole"]),
    ("What color is the sky on a clear day?", ["blue"]),
    ("What color is grass?", ["green"]),
    ("What color are bananas when they are ripe?", ["yellow"]),
    ("What color do you get by mixing blue and yellow?", ["green"]),
    ("What color do you get by mixing red and white?", ["pink"]),
    ("What color is snow?", ["white"]),
    ("What is frozen water called?", ["ice"]),
    ("What organ pumps blood through the body?", ["heart"]),
    ("What organ do humans use to breathe?", ["lungs", "lung"]),
    ("What is the largest organ of the human body?", ["skin"]),
    ("How many bones are in the adult human body?", ["206"]),
    ("How many teeth does an adult human usually have?", ["32", "thirty-two"]),
    ("Who wrote Romeo and Juliet?", ["shakespeare"]),
    ("Who wrote Hamlet?", ["shakespeare"]),
    ("Who painted the Mona Lisa?", ["leonardo", "da vinci"]),
    ("Who developed the theory of relativity?", ["einstein"]),
    ("Who was the first President of the United States?", ["washington"]),
    ("Who discovered penicillin?", ["fleming"]),
    ("Who proposed the theory of evolution by natural selection?", ["darwin"]),
    ("Who was the first person to walk on the Moon?", ["armstrong"]),
    ("Who invented the telephone?", ["bell"]),
    ("Who wrote the Harry Potter books?", ["rowling"]),
    ("What language is mainly spoken in Brazil?", ["portuguese"]),
    ("What language is mainly spoken in Mexico?", ["spanish"]),
    ("What language is mainly spoken in Germany?", ["german"]),
    ("What language is mainly spoken in Japan?", ["japanese"]),
    ("What is the currency of Japan?", ["yen"]),
    ("What is the currency of the United Kingdom?", ["pound"]),
    ("What is the currency of the United States?", ["dollar"]),
    ("In which country are the pyramids of Giza?", ["egypt"]),
    ("In which city is the Eiffel Tower?", ["paris"]),
    ("In which city is the Colosseum?", ["rome"]),
    ("In which country is the Great Wall?", ["china"]),
    ("In which city is the Statue of Liberty?", ["new york"]),
    ("In which country is Mount Fuji?", ["japan"]),
    ("On which continent is Kenya?", ["africa"]),
    ("On which continent is Brazil?", ["south america"]),
    ("What is the opposite of hot?", ["cold"]),
    ("What is the opposite of up?", ["down"]),
    ("What is the opposite of day?", ["night"]),
    ("What is the plural of mouse?", ["mice"]),
    ("What is the plural of child?", ["children"]),
    ("What is the past tense of go?", ["went"]),
    ("What is the first letter of the English alphabet?", ["a"]),
    ("How many letters are in the English alphabet?", ["26", "twenty-six"]),
    ("What shape has three sides?", ["triangle"]),
    ("What do we call a shape with eight sides?", ["octagon"]),
    ("What is the square root of 81?", ["9", "nine"]),
    ("What is the square root of 64?", ["8", "eight"]),
    ("What is half of 100?", ["50", "fifty"]),
    ("What is the main ingredient of guacamole?", ["avocado"]),
    ("What fruit is used to make wine?", ["grape"]),
    ("What is the hardest natural substance?", ["diamond"]),
    ("What metal is liquid at room temperature?", ["mercury"]),
    ("What force keeps us on the ground?", ["gravity"]),
    ("What is the center of an atom called?", ["nucleus"]),
    ("What do caterpillars turn into?", ["butterfly", "butterflies", "moth"]),
    ("What season comes after winter?", ["spring"]),
    ("What season comes after summer?", ["autumn", "fall"]),
    ("What day comes after Monday?", ["tuesday"]),
    ("What day comes after Friday?", ["saturday"]),
    ("What month comes after January?", ["february"]),
    ("What is the first month of the year?", ["january"]),
    ("What is the last month of the year?", ["december"]),
]

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
                "nineteen", "twenty"]  # fmt: skip


def _number_answers(value: int) -> list[str]:
    return [str(value)] + ([NUMBER_WORDS[value]] if 0 <= value < len(NUMBER_WORDS) else [])


def arithmetic(rng: random.Random, count: int) -> list[tuple[str, list[str]]]:
    """Seeded small sums, differences and products (no repeats)."""
    out: dict[str, list[str]] = {}
    while len(out) < count:
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        kind = rng.choice(("plus", "minus", "times"))
        if kind == "minus" and b > a:
            a, b = b, a
        if kind == "times":
            a, b = rng.randint(2, 10), rng.randint(2, 10)
        value = {"plus": a + b, "minus": a - b, "times": a * b}[kind]
        out.setdefault(f"What is {a} {kind} {b}?", _number_answers(value))
    return list(out.items())


def main() -> None:
    rows = [(f"What is the capital of {c}?", [city.lower()]) for c, city in CAPITALS.items()]
    rows += [(q, a) for q, a in FACTS]
    rows += arithmetic(random.Random(17), 100)
    with OUT.open("w") as f:
        for i, (q, answers) in enumerate(rows):
            f.write(json.dumps({"id": f"q{i:03d}", "prompt": q, "answers": answers}) + "\n")
    print(f"wrote {len(rows)} candidates to {OUT}")


if __name__ == "__main__":
    main()
