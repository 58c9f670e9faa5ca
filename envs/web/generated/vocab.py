"""The generator's vocabularies: field concepts with their labels, value sources, option lists and page texts.

Every concept has train labels and test labels (disjoint): train tasks label fields only with train labels;
test and test_families tasks only with test labels, so held-out evaluation asks a model to find "Forename" when
training only ever showed "First name" (reading, not memorised labels). A few concepts have no train labels at
all (HELD_OUT_CONCEPTS): they appear only in held-out tasks. Option values (countries, colours, ...) and the
page texts (buttons, tabs, popups) are shared by every split; free-text values drawn from envs/core/pools.py
(usernames, nicknames, passwords) keep pools' own train/test split of tokens.
"""
from __future__ import annotations

import random
from functools import lru_cache

from envs.core.pools import Pools

FIRST = ("Ana", "Bruno", "Carla", "Diego", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luca",
         "Maya", "Nils", "Olga", "Pablo", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wim", "Yara", "Zoltan")
LAST = ("Almeida", "Berg", "Costa", "Duarte", "Eriksen", "Fischer", "Garcia", "Horvat", "Ivanova", "Jansen",
        "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Silva", "Tanaka")
CITIES = ("Lisbon", "Porto", "Madrid", "Lyon", "Berlin", "Oslo", "Krakow", "Dublin", "Turin", "Ghent", "Bergen",
          "Seville", "Utrecht", "Tallinn", "Malmo", "Graz", "Nantes", "Bilbao", "Aarhus", "Riga")
STREETS = ("Oak Street", "Mill Lane", "River Road", "Church Walk", "Station Road", "High Street", "Park Avenue",
           "Harbour View", "Elm Close", "Bridge Street")
COMPANIES = ("Northwind", "Bluefield Labs", "Orbit Foods", "Kestrel Ltd", "Harbor Tech", "Pinecone Media",
             "Atlas Freight", "Copperleaf", "Lumen Works", "Silverline")
JOBS = ("Nurse", "Engineer", "Teacher", "Designer", "Accountant", "Chef", "Pilot", "Librarian", "Plumber",
        "Analyst", "Architect", "Pharmacist")
DOMAINS = ("example.com", "mail.test", "post.example", "inbox.test")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def _full(rng, pools):
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _email(rng, pools):
    return f"{rng.choice(FIRST).lower()}.{rng.choice(LAST).lower()}@{rng.choice(DOMAINS)}"


def _phone(rng, pools):
    return f"0{rng.randint(100, 999)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}"


def _username(rng, pools):
    return f"{pools.real(rng)}{rng.randint(1, 99)}"


def _password(rng, pools):
    return pools.random_string(rng) + str(rng.randint(10, 99))


def _postcode(rng, pools):
    return f"{rng.randint(1000, 9999)}-{rng.randint(100, 999)}"


def _pick(values):
    return lambda rng, pools: rng.choice(values)


# kind -> concept -> (train labels, test labels, value source (rng, pools) -> str)
TEXT = {
    "first_name": (("First name", "Given name"), ("Forename",), _pick(FIRST)),
    "last_name": (("Last name", "Surname"), ("Family name",), _pick(LAST)),
    "full_name": (("Full name", "Your name"), ("Name on the card",), _full),
    "email": (("Email", "Email address"), ("E-mail",), _email),
    "city": (("City", "Town"), ("Home town",), _pick(CITIES)),
    "street": (("Street", "Street address"), ("Address line 1",), _pick(STREETS)),
    "phone": (("Phone", "Phone number"), ("Mobile",), _phone),
    "company": (("Company", "Employer"), ("Organisation",), _pick(COMPANIES)),
    "job": (("Job title", "Position"), ("Occupation",), _pick(JOBS)),
    "username": (("Username", "User name"), ("Login name",), _username),
    "postcode": (("Postcode", "ZIP code"), ("Postal code",), _postcode),
    "nickname": (("Nickname", "Display name"), ("Screen name",), lambda rng, pools: pools.pseudo(rng).title()),
    "age": (("Age",), ("Your age",), lambda rng, pools: str(rng.randint(18, 90))),
    "quantity": (("Quantity", "Number of items"), ("Amount",), lambda rng, pools: str(rng.randint(2, 40))),
    "pet": ((), ("Pet's name",), lambda rng, pools: pools.pseudo(rng).title()),
    "plate": ((), ("Licence plate",),
              lambda rng, pools: f"{rng.randint(10, 99)}-{pools.random_string(rng)[:3]}".upper()),
}
PASSWORD = {
    "password": (("Password", "Passphrase"), ("Secret word",), _password),
    "access_code": (("Access code",), ("Security code",), _password),
}
DATE = {
    "birth": (("Date of birth", "Birthday"), ("Birth date",), (1950, 2005)),
    "start": (("Start date", "Arrival date"), ("Check-in date",), (2024, 2030)),
    "delivery": (("Delivery date",), ("Appointment date",), (2024, 2030)),
}
# kind -> concept -> (train labels, test labels, options)
SELECT = {
    "country": (("Country",), ("Nation",), ("Portugal", "Spain", "France", "Germany", "Italy", "Norway", "Canada",
                                             "Japan", "Brazil", "Kenya", "Chile", "Poland", "Ireland")),
    "colour": (("Favourite colour", "Colour"), ("Preferred colour",),
               ("Red", "Blue", "Green", "Yellow", "Purple", "Orange", "Black", "White", "Grey", "Teal")),
    "size": (("Size", "T-shirt size"), ("Shirt size",), ("XS", "S", "M", "L", "XL", "XXL")),
    "title": (("Title",), ("Salutation",), ("Mr", "Ms", "Mrs", "Dr", "Mx", "Prof")),
    "language": (("Language",), ("Preferred language",),
                 ("English", "Spanish", "French", "German", "Portuguese", "Italian", "Dutch", "Polish")),
    "month": (("Month",), ("Birth month",), MONTHS),
    "department": (("Department",), ("Division",), ("Sales", "Marketing", "Finance", "Support", "Legal", "Design")),
    "payment": (("Payment method",), ("Pay with",), ("Card", "Cash", "Bank transfer", "Voucher", "Cheque")),
    "currency": (("Currency",), ("Pay in",), ("EUR", "USD", "GBP", "JPY", "CHF", "SEK")),
}
RADIO = {
    "plan": (("Plan", "Subscription"), ("Tier",), ("Basic", "Standard", "Premium", "Family", "Student")),
    "contact": (("Contact me by", "Preferred contact"), ("Reach me via",), ("Email", "Phone", "Post", "SMS")),
    "seat": (("Seat",), ("Seat preference",), ("Window", "Aisle", "Middle")),
    "meal": (("Meal",), ("Dietary choice",), ("Vegetarian", "Vegan", "Fish", "Chicken", "Beef")),
    "frequency": (("Newsletter frequency", "How often"), ("Email frequency",), ("Daily", "Weekly", "Monthly", "Never")),
    "room": (("Room type",), ("Room",), ("Single", "Double", "Twin", "Suite")),
    "level": (("Experience level",), ("Skill level",), ("Beginner", "Intermediate", "Advanced", "Expert")),
}
CHECKBOX = {
    "interests": (("Interests", "Hobbies"), ("Pastimes",),
                  ("Hiking", "Chess", "Cooking", "Music", "Cycling", "Painting", "Gardening", "Swimming")),
    "toppings": (("Toppings",), ("Extras",), ("Cheese", "Olives", "Mushrooms", "Peppers", "Onions", "Basil")),
    "notify": (("Notify me about", "Send me"), ("Alerts for",), ("News", "Offers", "Updates", "Events", "Reminders")),
    "days": (("Available days",), ("Days you can work",),
             ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")),
}
# single boxes: (train texts, test texts)
SINGLE_BOX = (("I accept the terms", "Keep me signed in", "Send me a copy"),
              ("I agree to the privacy policy", "Remember this device"))
# kind -> concept -> (train labels, test labels, (query, suggestion) pairs)
AUTOCOMPLETE = {
    "airport": (("Destination", "Flying to"), ("Arrival airport",),
                tuple((c, f"{c} ({c[:3].upper()})") for c in ("Lisbon", "Berlin", "Dublin", "Oslo", "Madrid", "Vienna",
                                                              "Prague", "Athens", "Zurich", "Warsaw", "Helsinki"))),
    "proglang": (("Programming language", "Main skill"), ("Tech stack",),
                 tuple((x, x) for x in ("Java", "JavaScript", "Python", "Perl", "PHP", "Kotlin", "Go", "Rust",
                                        "Ruby", "Scala", "Swift"))),
    "breed": (("Dog breed",), ("Breed",),
              tuple((x, x) for x in ("Labrador Retriever", "Golden Retriever", "German Shepherd", "Border Collie",
                                     "Beagle", "Boxer", "Poodle", "Dachshund", "Dalmatian"))),
}
HELD_OUT_CONCEPTS = tuple(k for table in (TEXT, PASSWORD, DATE, SELECT, RADIO, CHECKBOX, AUTOCOMPLETE)
                          for k, v in table.items() if not v[0])

DATE_FORMATS = ("DD/MM/YYYY", "MM/DD/YYYY", "YYYY-MM-DD", "DD.MM.YYYY")
SUBMITS = ("Submit", "Send", "Save", "Register", "Continue", "Book now", "Apply", "Sign up", "Finish", "Place order")
OTHER_BUTTONS = (("Reset", "reset"), ("Clear form", "reset"), ("Help", "help"), ("Save draft", "note"),
                 ("Preview", "note"), ("Back", "note"))
LINKS = ("Privacy policy", "Terms of use", "Forgot password?", "Contact us", "FAQ")
TITLES = ("Create your account", "Delivery details", "Job application", "Event registration", "Book a table",
          "Contact form", "Update your profile", "Request a quote")
TABS = ("Personal", "Contact", "Preferences", "Account", "Details", "Extras", "Address", "Payment")
SECTIONS = ("More options", "Additional details", "Optional information", "Advanced settings")
HELP_TEXTS = ("We never share your data.", "Fields marked * are required.", "It takes about two minutes.",
              "You can change these details later.")
SIMILAR_PREFIXES = ("Previous", "Alternative", "Former")
POPUPS = (  # (name the instruction uses, text, buttons)
    ("cookie banner", "This site uses cookies to improve your visit.", ("Accept all", "Reject all")),
    ("newsletter popup", "Get news and offers: join our newsletter!", ("Subscribe", "No thanks")),
    ("notice", "Your session will expire in 10 minutes.", ("OK",)),
    ("survey popup", "Would you take a short survey after this form?", ("Sure", "Not now")),
)
CONFIRMS = (("Send this form now?", "Confirm", "Cancel"), ("Are you sure?", "Yes", "No"),
            ("Submit your answers?", "Yes, send", "Go back"))


def pools(split: str) -> Pools:
    """The value pools of a split: train, or test for every held-out split."""
    return _pools("train" if split == "train" else "test")


@lru_cache(maxsize=None)
def _pools(name: str) -> Pools:
    return Pools(name)  # built once: a Pools filters the whole word list


def labels_of(entry: tuple, split: str) -> tuple[str, ...]:
    """A concept's labels for a split (train: its train labels; every held-out split: its test labels)."""
    return entry[0] if split == "train" else entry[1]


def date_value(rng: random.Random, years: tuple[int, int]) -> tuple[int, int, int]:
    return rng.randint(*years), rng.randint(1, 12), rng.randint(1, 28)
