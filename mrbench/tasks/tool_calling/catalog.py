"""The procedural tool catalogue: tools with JSON-schema-like parameters, value pools and request templates.

Every tool is an everyday assistant action (weather, currency conversion, calendar, email,
flights, unit conversion, stock quotes, reminders, …). Each parameter has a JSON type and a pool
of values; every request template mentions each value verbatim, so a correct call can be
produced by choosing the right tool and copying values from the request. That keeps the task
learnable by the ~1M-parameter CPU models while still separating tool choice (function_name),
argument structure (parameter) and argument content (values).

Descriptions are deliberately terse: the system prompt must stay a few hundred characters.
Nothing here does work at import time beyond building small constant tuples.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

JsonValue = str | int | float | bool


@dataclass(frozen=True)
class Param:
    """One tool parameter: name, JSON type and the pool its values are drawn from."""

    name: str
    type: str  # "string" | "integer" | "number" | "boolean"
    pool: tuple[JsonValue, ...]
    description: str = ""


@dataclass(frozen=True)
class Tool:
    """A callable tool: its parameters (all required) and request templates with ``{param}`` slots.

    ``distinct`` names parameters that must take different values (a flight's origin and
    destination); ``joint``/``joint_pool`` draw several parameters together from a list of
    allowed combinations (unit pairs that convert into each other).
    """

    name: str
    description: str
    params: tuple[Param, ...]
    templates: tuple[str, ...]
    distinct: tuple[str, ...] = ()
    joint: tuple[str, ...] = ()
    joint_pool: tuple[tuple[JsonValue, ...], ...] = ()

    def sample_arguments(self, rng: random.Random) -> dict[str, JsonValue]:
        """Draw one argument assignment (in parameter order) honouring ``distinct`` and ``joint``.

        >>> args = TOOLS_BY_NAME["search_flights"].sample_arguments(random.Random(0))
        >>> list(args), args["origin"] != args["destination"]
        (['origin', 'destination', 'date'], True)
        """
        fixed: dict[str, JsonValue] = {}
        if self.joint:
            fixed = dict(zip(self.joint, rng.choice(self.joint_pool), strict=True))
        args: dict[str, JsonValue] = {}
        taken: set[JsonValue] = set()
        for p in self.params:
            if p.name in fixed:
                args[p.name] = fixed[p.name]
                continue
            pool = [v for v in p.pool if v not in taken] if p.name in self.distinct else list(p.pool)
            args[p.name] = rng.choice(pool)
            if p.name in self.distinct:
                taken.add(args[p.name])
        return args

    def schema(self) -> dict[str, Any]:
        """The full JSON-schema-style description (what a real tool registry would hold)."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": {
                    p.name: {"type": p.type, **({"description": p.description} if p.description else {})}
                    for p in self.params
                },
                "required": [p.name for p in self.params],
            },
        }

    def compact(self) -> dict[str, Any]:
        """The short form shown in prompts: ``{"name", "description", "parameters": {name: type}}``.

        >>> TOOLS_BY_NAME["get_weather"].compact()
        {'name': 'get_weather', 'description': 'Current weather in a city', 'parameters': {'city': 'string'}}
        """
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {p.name: p.type for p in self.params},
        }


_CITIES = (
    "Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Cairo", "Lima", "Oslo", "Seoul",
    "Dublin", "Vienna", "Boston", "Denver", "Sydney", "Toronto", "Mumbai", "Nairobi", "Lisbon",
    "Prague", "Athens", "Chicago", "Austin", "Zurich", "Miami", "Delhi", "Quito", "Hanoi",
)  # fmt: skip
_CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "INR", "CNY", "SEK", "NOK", "MXN")
_AMOUNTS = (5, 12, 20, 25, 40, 50, 75, 80, 100, 120, 150, 200, 250, 300, 450, 500, 750, 900, 1000, 1200, 2500)
_MONTHS = ("May", "June", "July", "March", "April", "August", "October", "December")
_DATES = tuple(f"{m} {d}" for m in _MONTHS for d in (1, 3, 5, 9, 12, 14, 18, 21, 25, 28))
_TIMES = (
    "7:00", "7:30", "8:15", "9:00", "10:30", "12:00", "13:45", "15:00", "17:30", "18:00", "20:15", "21:00",
)  # fmt: skip
_NAMES = ("Anna", "Ben", "Chloe", "David", "Emma", "Felix", "Grace", "Hugo", "Iris", "Jack", "Lena", "Omar")
_SUBJECTS = (
    "budget", "lunch", "the trip", "rent", "the report", "dinner", "the meeting", "holidays", "the launch",
)  # fmt: skip
_EVENTS = ("dentist", "team sync", "yoga", "lunch with Sam", "gym", "review", "dinner party", "piano lesson")
_SYMBOLS = ("AAPL", "MSFT", "GOOG", "AMZN", "TSLA", "NVDA", "META", "IBM", "ORCL", "INTC", "SAP", "SONY")
_UNITS = (
    ("km", "miles"), ("miles", "km"), ("kg", "lb"), ("lb", "kg"), ("meters", "feet"), ("feet", "meters"),
    ("liters", "gallons"), ("celsius", "fahrenheit"), ("fahrenheit", "celsius"), ("cm", "inches"),
)  # fmt: skip
_UNIT_NAMES = tuple(sorted({u for pair in _UNITS for u in pair}))
_QUANTITIES = (2, 3, 5, 8, 10, 12, 15, 20, 26, 30, 42, 50, 64, 100)
_REMINDERS = (
    "call mom", "buy milk", "pay rent", "water plants", "walk the dog", "book tickets", "take pills",
    "send invoice", "pick up Leo",
)  # fmt: skip
_LANGUAGES = ("French", "German", "Spanish", "Italian", "Japanese", "Dutch", "Korean")
_PHRASES = (
    "good morning", "thank you", "where is the station", "how much is it", "see you soon", "I am hungry",
)  # fmt: skip
_ARTISTS = ("Adele", "Queen", "Drake", "Coldplay", "Shakira", "Muse", "Sia", "Abba", "Bjork", "Oasis")
_RESTAURANTS = ("Luigi", "Sakura", "Blue Door", "El Toro", "Green Leaf", "Bistro 9", "Spice Hut")
_PEOPLE = (2, 3, 4, 5, 6, 8)
_TOPICS = ("sports", "science", "politics", "tech", "health", "music", "travel", "business", "climate")
_PERCENTS = (10, 12, 15, 18, 20, 25)

TOOLS: tuple[Tool, ...] = (
    Tool(
        "get_weather",
        "Current weather in a city",
        (Param("city", "string", _CITIES),),
        (
            "What's the weather in {city}?",
            "How is the weather in {city} today?",
            "Is it raining in {city}?",
            "Weather in {city}, please.",
            "Do I need an umbrella in {city}?",
        ),
    ),
    Tool(
        "convert_currency",
        "Convert money between currencies",
        (
            Param("amount", "number", _AMOUNTS),
            Param("from", "string", _CURRENCIES),
            Param("to", "string", _CURRENCIES),
        ),
        (
            "Convert {amount} {from} to {to}.",
            "How much is {amount} {from} in {to}?",
            "Change {amount} {from} into {to}.",
            "What do {amount} {from} make in {to}?",
        ),
        distinct=("from", "to"),
    ),
    Tool(
        "create_event",
        "Add a calendar event",
        (Param("title", "string", _EVENTS), Param("date", "string", _DATES)),
        (
            "Add {title} to my calendar on {date}.",
            "Schedule {title} for {date}.",
            "Put {title} in the calendar for {date}.",
            "Create an event {title} on {date}.",
        ),
    ),
    Tool(
        "send_email",
        "Send an email",
        (Param("to", "string", _NAMES), Param("subject", "string", _SUBJECTS)),
        (
            "Email {to} about {subject}.",
            "Send {to} an email about {subject}.",
            "Write to {to} regarding {subject}.",
            "Drop {to} a mail about {subject}.",
        ),
    ),
    Tool(
        "search_flights",
        "Find flights",
        (
            Param("origin", "string", _CITIES),
            Param("destination", "string", _CITIES),
            Param("date", "string", _DATES),
        ),
        (
            "Find flights from {origin} to {destination} on {date}.",
            "Any flights {origin} to {destination} on {date}?",
            "I need to fly from {origin} to {destination} on {date}.",
            "Search flights {origin} - {destination}, {date}.",
        ),
        distinct=("origin", "destination"),
    ),
    Tool(
        "convert_units",
        "Convert a quantity between units",
        (
            Param("value", "number", _QUANTITIES),
            Param("from_unit", "string", _UNIT_NAMES),
            Param("to_unit", "string", _UNIT_NAMES),
        ),
        (
            "Convert {value} {from_unit} to {to_unit}.",
            "How many {to_unit} is {value} {from_unit}?",
            "What is {value} {from_unit} in {to_unit}?",
            "{value} {from_unit} in {to_unit}, please.",
        ),
        joint=("from_unit", "to_unit"),
        joint_pool=_UNITS,
    ),
    Tool(
        "get_stock_price",
        "Latest stock price",
        (Param("symbol", "string", _SYMBOLS),),
        (
            "What's the stock price of {symbol}?",
            "How is {symbol} trading?",
            "Get me a quote for {symbol}.",
            "Price of {symbol} shares?",
        ),
    ),
    Tool(
        "set_reminder",
        "Set a reminder",
        (Param("text", "string", _REMINDERS), Param("time", "string", _TIMES)),
        (
            "Remind me to {text} at {time}.",
            "Set a reminder to {text} at {time}.",
            "At {time}, remind me to {text}.",
            "Don't let me forget to {text} at {time}.",
        ),
    ),
    Tool(
        "translate",
        "Translate text",
        (Param("text", "string", _PHRASES), Param("language", "string", _LANGUAGES)),
        (
            "Translate '{text}' into {language}.",
            "How do you say '{text}' in {language}?",
            "Say '{text}' in {language}.",
            "What is '{text}' in {language}?",
        ),
    ),
    Tool(
        "play_music",
        "Play songs by an artist",
        (Param("artist", "string", _ARTISTS),),
        (
            "Play some {artist}.",
            "Put on music by {artist}.",
            "I want to listen to {artist}.",
            "Play songs from {artist}.",
        ),
    ),
    Tool(
        "book_table",
        "Reserve a restaurant table",
        (Param("restaurant", "string", _RESTAURANTS), Param("people", "integer", _PEOPLE)),
        (
            "Book a table at {restaurant} for {people}.",
            "Reserve {restaurant} for {people} people.",
            "Get us a table for {people} at {restaurant}.",
            "Table for {people} at {restaurant}, please.",
        ),
    ),
    Tool(
        "get_news",
        "Latest headlines on a topic",
        (Param("topic", "string", _TOPICS),),
        (
            "Any news about {topic}?",
            "Show me the latest {topic} news.",
            "What's new in {topic}?",
            "Headlines on {topic}, please.",
        ),
    ),
    Tool(
        "calculate_tip",
        "Tip for a bill",
        (Param("bill", "number", _AMOUNTS), Param("percent", "integer", _PERCENTS)),
        (
            "What's the {percent}% tip on {bill}?",
            "Calculate a {percent} percent tip for a {bill} bill.",
            "Tip {percent}% on {bill}.",
            "How much is {percent}% of {bill} as a tip?",
        ),
    ),
)

TOOLS_BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}

# Requests that no offered tool serves: small talk and questions outside the catalogue. The gold
# answer is a plain <response>; slots make the phrasing space large enough for a disjoint split.
NO_CALL_TEMPLATES: tuple[tuple[str, str], ...] = (
    ("Hi, I'm {name}!", "Hello {name}, how can I help?"),
    ("Thanks {name}, that helped.", "You're welcome!"),
    ("Tell me a joke about {topic}.", "I can only help with my tools."),
    ("Who invented {topic}?", "I can't answer that with my tools."),
    ("Good night, {name}.", "Good night!"),
    ("What is your favourite {topic} story?", "I don't have one, sorry."),
    ("Can you sing about {city}?", "Sorry, I can't sing."),
    ("Write a poem about {city}.", "Sorry, I can't write poems."),
    ("How old is {city}?", "I can't answer that with my tools."),
)
NO_CALL_POOLS: dict[str, tuple[str, ...]] = {"name": _NAMES, "topic": _TOPICS, "city": _CITIES}
