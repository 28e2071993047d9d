"""General chat prompts of our own, for the drafter's training data.

A drafter learns the target's style on the target's own answers, so what it is trained on
should look like what users ask. The technical corpora (issue reports, code prompts) teach
it code; this adds the rest of a chat assistant's day — writing, role play, reasoning,
arithmetic, extraction, science and humanities questions — composed from templates and
subjects with a seeded generator (no public evaluation set is copied: MT-Bench stays unseen
and is what `hsedit drafter eval` and the bench's chat workload measure on).
"""

from __future__ import annotations

import random

TOPICS = [
    "a small coastal town", "learning a second language", "remote work", "a rainy afternoon", "city gardens",
    "an old lighthouse", "public libraries", "a night train across Europe", "the first day at a new job",
    "a family recipe", "volunteering at an animal shelter", "a mountain hike", "electric bicycles",
    "a forgotten letter", "street markets", "a chess tournament", "moving to a new country", "a winter festival",
    "a solar-powered school", "friendship between neighbours", "a lost dog finding its way home",
    "the history of tea", "a robot that learns to paint", "a jazz club", "recycling in apartment buildings",
    "a bakery that opens at dawn", "a museum after closing time", "a long-distance friendship",
    "the ocean at night", "a community theatre", "saving money as a student", "a desert road trip",
]
FORMS = [
    "a short story", "a poem", "a blog post", "a persuasive essay", "a product description", "a speech",
    "a diary entry", "a newsletter introduction", "a short dialogue", "a limerick", "a haiku sequence",
    "an opening paragraph for a novel", "a postcard message", "a review", "a motivational message",
]
AUDIENCES = ["children", "teenagers", "busy parents", "retirees", "university students", "software engineers",
             "small business owners", "first-time travellers", "a general audience", "new employees"]
TONES = ["warm", "humorous", "formal", "enthusiastic", "calm", "suspenseful", "nostalgic", "concise"]
EMAILS = [
    "ask a manager for a day off next Friday", "thank a colleague for help with a presentation",
    "apologise to a customer for a late delivery", "invite neighbours to a street party",
    "ask a professor for an extension on an assignment", "follow up after a job interview",
    "propose a new weekly team meeting format", "decline a meeting invitation politely",
    "request feedback on a draft report", "announce a change of office hours",
]
PERSONAS = [
    ("a ship's captain in the eighteenth century", "What do you fear most at sea?"),
    ("a friendly librarian", "Can you recommend a book for a long flight?"),
    ("a personal fitness coach", "How should I start exercising after a long break?"),
    ("a medieval blacksmith", "What makes a good sword?"),
    ("a travel agent", "Plan a three-day visit to a city you love."),
    ("a detective in a noir film", "Describe the case that still keeps you awake."),
    ("a nutritionist", "What is a healthy breakfast for a busy morning?"),
    ("a museum tour guide", "Tell me about the most valuable painting here."),
    ("a career counsellor", "I am unsure whether to change careers at forty. What should I consider?"),
    ("an astronaut on the space station", "What does a normal day look like for you?"),
    ("a chef in a busy restaurant", "How do you keep calm during the dinner rush?"),
    ("a wise old tree in a forest", "What have you seen change over the years?"),
    ("a customer support agent", "My order arrived damaged. What can you do?"),
    ("a stand-up comedian", "Tell me a joke about computers."),
    ("a language tutor", "Correct this sentence and explain: 'He go to school every days.'"),
    ("a historian", "What was daily life like in ancient Rome?"),
]
CONCEPTS = [
    "photosynthesis", "inflation", "the water cycle", "black holes", "vaccines", "supply and demand",
    "plate tectonics", "compound interest", "natural selection", "the greenhouse effect", "machine learning",
    "the immune system", "electric circuits", "gravity", "the Pythagorean theorem", "probability",
    "climate and weather", "DNA", "renewable energy", "the stock market", "how the internet works",
    "nuclear fission", "the scientific method", "antibiotic resistance", "entropy", "how airplanes fly",
    "blockchains", "the placebo effect", "ocean tides", "how memory works in the brain",
]
HUMANITIES = [
    "the printing press", "the Industrial Revolution", "the Renaissance", "the fall of the Roman Empire",
    "the invention of writing", "the Silk Road", "the French Revolution", "the spread of railways",
    "the rise of social media", "the Olympic Games", "the Cold War", "the invention of photography",
    "ancient Greek philosophy", "the age of exploration", "the abolition of slavery", "universal suffrage",
]
PAIRS = [
    ("cats", "dogs as pets"), ("reading books", "watching films"), ("living in a city", "living in the countryside"),
    ("trains", "planes for travel in Europe"), ("working from home", "working in an office"),
    ("renting", "buying a home"), ("paper books", "e-readers"), ("team sports", "individual sports"),
    ("Python", "JavaScript for a beginner"), ("saving", "investing"), ("public", "private schools"),
]
NAMES = ["Alice", "Ben", "Chen", "Dara", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kira", "Luis"]
ITEMS = [("apples", 3), ("notebooks", 4), ("tickets", 12), ("coffees", 5), ("books", 15), ("shirts", 20),
         ("plants", 8), ("pens", 2), ("cakes", 9), ("lamps", 25)]
CITIES = ["Lisbon", "Oslo", "Nairobi", "Lima", "Hanoi", "Toronto", "Krakow", "Porto", "Seoul", "Cape Town"]
COMPANIES = ["Northwind", "Bluepeak", "Riverstone", "Sunfield", "Greenleaf", "Ironbridge", "Brightwave"]


def _writing(r: random.Random) -> str:
    return r.choice([
        lambda: f"Write {r.choice(FORMS)} about {r.choice(TOPICS)}.",
        lambda: f"Write {r.choice(FORMS)} about {r.choice(TOPICS)} for {r.choice(AUDIENCES)}, in a {r.choice(TONES)} tone.",
        lambda: f"Write an email to {r.choice(EMAILS)}.",
        lambda: f"Draft a short, {r.choice(TONES)} email to {r.choice(EMAILS)}. Keep it under 150 words.",
        lambda: f"Give me five catchy titles for an article about {r.choice(TOPICS)}.",
        lambda: f"Outline a blog post comparing {' and '.join(r.choice(PAIRS))}, with headings and key points.",
        lambda: f"Describe {r.choice(TOPICS)} using vivid sensory details, in one paragraph.",
        lambda: f"Rewrite this sentence to sound more {r.choice(TONES)}: \"We will be closed on Monday.\"",
    ])()


def _roleplay(r: random.Random) -> str:
    persona, question = r.choice(PERSONAS)
    return r.choice([
        f"Pretend you are {persona}. {question}",
        f"You are {persona}. Stay in character and answer: {question}",
        f"Act as {persona}. {question} Answer in a few sentences.",
    ])


def _reasoning(r: random.Random) -> str:
    a, b, c = r.sample(NAMES, 3)
    n, m = r.randint(2, 9), r.randint(2, 9)
    return r.choice([
        f"{a} is taller than {b}, and {b} is taller than {c}. Who is the shortest? Explain your reasoning.",
        f"{a} has {n} brothers. Each brother has {m} sisters. How many sisters does {a} have if {a} is a girl? Explain.",
        f"If it takes {n} machines {n} minutes to make {n} widgets, how long would it take {n * m} machines to make {n * m} widgets?",
        "A clock shows 3:15. What is the angle between the hour and the minute hands? Think step by step.",
        f"Which word does not belong: {r.choice(['apple, banana, carrot, cherry', 'violin, guitar, drum, cello', 'Paris, Rome, Spain, Berlin', 'red, blue, circle, green'])}? Explain why.",
        f"{a} is facing north and turns right twice, then left once. Which direction is {a} facing now?",
        "If all bloops are razzies and all razzies are lazzies, are all bloops definitely lazzies? Explain.",
        f"{a} is {n * 3} years old, which is three times as old as {b}. How old will {b} be in {m} years?",
    ])


def _math(r: random.Random) -> str:
    a, b, c = r.randint(2, 12), r.randint(1, 30), r.randint(31, 99)
    item, price = r.choice(ITEMS)
    name = r.choice(NAMES)
    return r.choice([
        f"Solve for x: {a}x + {b} = {c}.",
        f"What is {a * 7}% of {c * 10}? Show your working.",
        f"{name} buys {a} {item} at ${price} each and pays with a ${(a * price // 50 + 1) * 50} note. How much change does {name} get?",
        f"A rectangle is {a} cm wide and {b + a} cm long. What are its area and perimeter?",
        f"Find the mean and the median of these numbers: {', '.join(str(r.randint(1, 50)) for _ in range(7))}.",
        f"A train travels {c * 3} km in {a} hours. What is its average speed? How far does it go in {b} hours at that speed?",
        f"What is the probability of rolling a sum of {r.randint(3, 11)} with two fair dice?",
        f"Simplify the fraction {a * b}/{a * c}, and write it as a decimal rounded to two places.",
        f"An investment of ${c * 100} earns {a}% interest per year, compounded yearly. What is it worth after {r.randint(2, 5)} years?",
        f"Find f({a}) if f(x) = {r.randint(1, 5)}x^2 - {b}x + {r.randint(1, 20)}.",
    ])


def _coding(r: random.Random) -> str:
    return r.choice([
        "Explain the difference between a list and a tuple in Python, with examples.",
        "What is recursion? Give a simple example in Python.",
        "Explain what a SQL JOIN does, with a small example.",
        "Write a Python function that counts how often each word appears in a string.",
        "Write a Python function that checks whether a string is a palindrome, ignoring spaces and case.",
        "What is the difference between a process and a thread?",
        "Explain Big-O notation to a beginner.",
        f"Write a short Python script that reads a CSV file and prints the average of its '{r.choice(['price', 'score', 'age', 'amount'])}' column.",
        "How does a hash table work?",
        "What are the advantages of writing unit tests?",
        "Write a function in JavaScript that returns the largest number in an array.",
        "Explain what Git branches are and when to use them.",
    ])


def _extraction(r: random.Random) -> str:
    a, b = r.sample(NAMES, 2)
    city, company = r.choice(CITIES), r.choice(COMPANIES)
    year, amount = r.randint(1990, 2024), r.randint(2, 90)
    text = (f"In {year}, {a} founded {company} in {city}. Three years later {b} joined as chief engineer, "
            f"and the company raised ${amount} million to open a second office.")
    return r.choice([
        f"Extract every person, place, organisation and year from this text as a JSON object:\n{text}",
        f"Summarise this text in one sentence:\n{text}",
        f"Answer from the text only: who founded the company, and where?\n{text}",
        f"Turn this text into a table with the columns event and year:\n{text}",
        f"List the numbers in this text and what each one refers to:\n{text}",
    ])


def _stem(r: random.Random) -> str:
    concept = r.choice(CONCEPTS)
    return r.choice([
        f"Explain {concept} in simple terms.",
        f"Explain {concept} to {r.choice(AUDIENCES)}.",
        f"What are the most common misconceptions about {concept}?",
        f"Give three everyday examples of {concept}.",
        f"How would you teach {concept} in a ten-minute lesson?",
        f"What is {concept}, and why does it matter?",
    ])


def _humanities(r: random.Random) -> str:
    subject = r.choice(HUMANITIES)
    first, second = r.choice(PAIRS)
    return r.choice([
        f"What were the main causes and effects of {subject}?",
        f"Describe how {subject} changed everyday life.",
        f"Write a short essay on the legacy of {subject}.",
        f"What are the pros and cons of {first} compared with {second}?",
        f"Give balanced arguments for and against {first} versus {second}.",
        f"Which three lessons can we learn today from {subject}?",
    ])


CATEGORIES = {
    "writing": _writing, "roleplay": _roleplay, "reasoning": _reasoning, "math": _math,
    "coding": _coding, "extraction": _extraction, "stem": _stem, "humanities": _humanities,
}


def general_prompts(count: int, seed: int = 0) -> list[str]:
    """`count` distinct prompts, the categories in turn (each one's templates and subjects drawn
    with a generator seeded by `seed`): the same list on every call with the same arguments."""
    r = random.Random(seed)
    makers = list(CATEGORIES.values())
    seen: set[str] = set()
    out: list[str] = []
    attempts = 0
    while len(out) < count and attempts < count * 50:
        prompt = makers[attempts % len(makers)](r)
        attempts += 1
        if prompt not in seen:
            seen.add(prompt)
            out.append(prompt)
    return out
