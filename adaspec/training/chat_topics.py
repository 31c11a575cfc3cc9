"""Several thousand training chat prompts, made from templates x topics written for this repo (issue 11).

No chat dataset ships on PyPI (NOTES.md), and the 315 hand-written training prompts are too few: the
draft memorised them. These prompts cover the same kinds of request as the held-out chat split
(explanations, how-to, comparisons, writing, small maths, Python questions) over a few hundred
topics. `chat_prompts(n, seed)` is deterministic; prompts that equal a held-out prompt (after
normalising case and spacing) are dropped, so the held-out split stays unseen.
"""

from __future__ import annotations

import random

from . import corpus

# topic kinds: each template is written for one kind, so the sentence makes sense
TOPICS = {
    "thing": """photosynthesis|the water cycle|black holes|earthquakes|tides|the northern lights|coral reefs|
        volcanoes|glaciers|thunderstorms|the moon's phases|solar eclipses|magnets|electricity|sound waves|
        rainbows|gravity|the human heart|sleep|dreams|memory|muscles|bones|the immune system|bacteria|viruses|
        honeybees|ants|octopuses|whales|penguins|migrating birds|bats|dinosaurs|fossils|deserts|rainforests|
        rivers|mountains|islands|the ocean floor|clouds|wind|snowflakes|lightning|compasses|clocks|bicycles|
        steam engines|jet engines|electric cars|batteries|solar panels|wind turbines|nuclear power|satellites|
        rockets|telescopes|microscopes|the printing press|the telephone|radio|television|the internet|
        email|smartphones|GPS|3D printers|robots|artificial intelligence|computer memory|hard drives|
        compilers|operating systems|databases|encryption|passwords|web browsers|search engines|
        cloud computing|credit cards|banks|taxes|inflation|interest rates|stock markets|budgets|
        insurance|supply and demand|trade|money|the Roman Empire|ancient Egypt|the Silk Road|the Renaissance|
        the Industrial Revolution|the Vikings|medieval castles|the Olympic Games|democracy|elections|libraries|
        museums|maps|languages|writing systems|music scales|jazz|orchestras|painting|photography|cinema|
        theatre|poetry|novels|chess|football|tennis|swimming|running|yoga|meditation|gardening|composting|
        bread|cheese|coffee|tea|chocolate|spices|rice|vegetables|fruit|vitamins|protein|recycling|plastic|
        glass|paper|concrete|steel|wood|cotton|wool|bridges|tunnels|skyscrapers|dams|lighthouses|trains|ships|
        submarines|airplanes|hot air balloons|traffic lights|elevators|refrigerators|microwaves|washing machines""",
    "skill": """cook pasta|bake bread|make a budget|save money|learn a new language|study for an exam|
        write a resume|prepare for a job interview|give a presentation|run a meeting|plant tomatoes|
        take care of a houseplant|train a puppy|care for a cat|fix a flat bicycle tire|change a light bulb|
        clean a laptop keyboard|organise a closet|pack for a trip|plan a birthday party|make new friends|
        start running|improve my sleep|drink more water|reduce stress|focus while studying|read more books|
        take better photos|learn to play the guitar|write a short story|keep a journal|learn to swim|
        ride a bicycle|make a paper airplane|brew tea|make pancakes|set up a home office|back up my files|
        choose a strong password|speed up my computer|learn to type faster|draw a portrait|paint with watercolors|
        knit a scarf|build a birdhouse|start a vegetable garden|reduce food waste|save energy at home""",
    "pair": """a lake and a pond|a hill and a mountain|a virus and a bacterium|weather and climate|a comet and an asteroid|
        a crocodile and an alligator|a rabbit and a hare|a butterfly and a moth|a fruit and a vegetable|
        baking soda and baking powder|a city and a town|a novel and a short story|a democracy and a monarchy|
        renting and buying a home|a debit card and a credit card|a tablet and a laptop|RAM and storage|
        a compiler and an interpreter|a tuple and a list in Python|a function and a method|TCP and UDP|
        HTTP and HTTPS|a bug and a feature|speed and velocity|mass and weight|heat and temperature|
        an ocean and a sea|a tornado and a hurricane|a violin and a cello|tea and coffee|walking and running""",
    "code": """reverses a string|checks whether a number is prime|counts the vowels in a string|returns the largest item in a list|
        removes duplicates from a list|computes the average of a list of numbers|checks whether a word is a palindrome|
        returns the n-th Fibonacci number|sorts a list of dictionaries by a key|flattens a nested list|
        counts how often each word appears in a text|converts Celsius to Fahrenheit|finds the second largest number in a list|
        checks whether two strings are anagrams|returns the sum of the digits of a number|capitalises every word in a sentence|
        finds the common elements of two lists|rotates a list by k positions|computes the greatest common divisor of two numbers|
        reads a text file and returns its lines|checks whether a year is a leap year|returns the running total of a list|
        groups words by their first letter|finds the longest word in a sentence|converts a binary string to an integer|
        validates an email address with a simple rule|chunks a list into pieces of size n|transposes a matrix|
        computes the median of a list|merges two dictionaries""",
    "place": """a busy train station|a quiet library|an old lighthouse|a mountain village|a night market|a forest after rain|
        a beach in winter|a small bakery|a space station|an abandoned castle|a desert oasis|a harbour at dawn|
        a snowy cabin|a crowded stadium|a secret garden|an underwater city|a museum at night|a farm in summer""",
}

TEMPLATES = {
    "thing": [
        "Explain {t} in simple terms.", "How do {t} work?", "What are three interesting facts about {t}?",
        "Why are {t} important?", "Give me a short history of {t}.", "Explain {t} to a ten-year-old.",
        "What are common misconceptions about {t}?", "Write a short poem about {t}.",
        "Summarise what scientists know about {t}.", "What would the world be like without {t}?",
        "Write a paragraph for a school report about {t}.", "List the pros and cons of {t}.",
        "Write a short story in which {t} play an important role.", "What questions do people often ask about {t}?",
    ],
    "skill": [
        "How do I {t}?", "Give me a step-by-step guide to {t}.", "What are some tips to {t}?",
        "What mistakes should I avoid when I try to {t}?", "I want to {t}. Where should I start?",
        "Make a one-week plan to {t}.", "Why is it worth learning to {t}?",
    ],
    "pair": [
        "What is the difference between {t}?", "Compare {t}.", "Which is better for a beginner: {t}?",
        "Explain the similarities and differences between {t}.",
    ],
    "code": [
        "Write a Python function that {t}.", "Write a Python function that {t}, and explain how it works.",
        "Show me how to write a function in Python that {t}. Include an example call.",
        "Write a short Python program that {t} and add comments.",
    ],
    "place": [
        "Describe {t}.", "Write a short story set in {t}.", "Write a poem about {t}.",
        "Describe the sounds and smells of {t}.",
    ],
}


def _topics(kind: str) -> list[str]:
    return [t.strip() for t in TOPICS[kind].split("|") if t.strip()]


def _maths(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 90), rng.randint(2, 40), rng.randint(2, 12)
    return rng.choice([
        f"What is {a} percent of {b * 10} dollars?",
        f"A shop sells pencils at {c} for {b} cents. How much do {a} pencils cost?",
        f"If a train travels {a * 5} kilometers in {c} hours, what is its average speed?",
        f"What is the area of a rectangle that is {a} meters long and {b} meters wide?",
        f"I have {a + 20} apples and give away {a // 2}. How many are left?",
        f"How many minutes are there in {c} hours and {b} minutes?",
        f"What is {a} times {b}, and how can I check the answer?",
    ])


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def all_template_prompts() -> list[str]:
    """Every template x topic prompt (unshuffled, deterministic order)."""
    out = []
    for kind, templates in TEMPLATES.items():
        for topic in _topics(kind):
            out += [tpl.format(t=topic) for tpl in templates]
    return out


def chat_prompts(n: int, seed: int = 0) -> list[str]:
    """`n` distinct training chat prompts: the repo's training chat prompts first, then template x
    topic prompts and small word problems in a seeded order; never a held-out prompt."""
    held = {_norm(t.text) for t in corpus.chat_items("heldout")}
    rng = random.Random(f"chat-topics:{seed}")
    pool = all_template_prompts()
    rng.shuffle(pool)
    pool += [_maths(rng) for _ in range(max(0, n - len(pool)))]
    out, seen = [], set(held)
    for text in [t.text for t in corpus.chat_items("train")] + pool:
        key = _norm(text)
        if key not in seen:
            seen.add(key)
            out.append(text)
        if len(out) >= n:
            break
    return out
