"""Chat prompts for the benchmarks, written here (no chat data set ships on PyPI, see NOTES.md).

Eight one-turn user messages of mixed length and kind (short questions, a how-to, code, a rewrite
of a pasted paragraph), so a batch has ragged prompt lengths the way real traffic does. They are
rendered with the model's chat template by the benchmark, not here.
"""

CHAT_PROMPTS: list[str] = [
    "What is the capital of Australia?",
    "Give me three tips for sleeping better.",
    "Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation.",
    "Explain the difference between a process and a thread to someone who is new to programming. "
    "Use a simple analogy.",
    "I'm planning a three-day trip to Lisbon in late October with my partner. We like food, walking "
    "and museums but not nightlife. Can you suggest a rough plan for each day, with a couple of "
    "restaurants?",
    "Summarise the following paragraph in two sentences:\n\n"
    "The city council met on Tuesday to discuss the proposed expansion of the public library. "
    "Supporters argued that the current building is too small for the growing number of visitors, "
    "especially children attending after-school programmes, and that a new wing would add study "
    "rooms and a computer lab. Opponents worried about the cost, which is estimated at 4.2 million "
    "dollars, and about the loss of green space in the adjacent park. After two hours of debate, "
    "the council voted to commission a detailed cost study before making a final decision in spring.",
    "Here is my SQL query, it is very slow on a table with 10 million rows:\n\n"
    "SELECT customer_id, COUNT(*) FROM orders WHERE YEAR(created_at) = 2024 GROUP BY customer_id "
    "ORDER BY COUNT(*) DESC LIMIT 10;\n\nWhy is it slow and how can I make it faster?",
    "Write a short, polite email to my landlord asking when the broken heating in my flat will be "
    "repaired. It has been out for five days and the nights are getting cold.",
]
