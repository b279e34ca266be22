#!/usr/bin/env python
"""Build ``acute/data/questions.jsonl``, the built-in default question set.

The facts below are short, well-known and unambiguous general knowledge written for this
project (no benchmark text). Each row gets gold answers (the gold answer first, then common
aliases), plausible-but-wrong answers of the same type, and one answer of a different type
(``wrong_type``) drawn with a fixed seed from other rows' gold answers. Arithmetic questions are
generated and their results computed here, never typed by hand.

Tables use compact strings: ``"Gold|alias|alias"`` and ``"wrong|wrong"``.

Usage::

    python examples/build_questions.py                 # rewrites acute/data/questions.jsonl
    python examples/build_questions.py --out /tmp/q.jsonl

The output is deterministic: running the script twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import unicodedata
from collections.abc import Iterable
from pathlib import Path

SEED = 135
E, M, H = "easy", "medium", "hard"
ANSWER_TYPES = ("place", "person", "number", "date", "other")
# For each answer type, the types wrong_type answers are drawn from.
WRONG_TYPE_SOURCES: dict[str, tuple[str, ...]] = {
    "place": ("date",),
    "person": ("date",),
    "number": ("person", "place"),
    "date": ("place", "person"),
    "other": ("date", "person"),
}
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "acute" / "data" / "questions.jsonl"

# --------------------------------------------------------------------------------------------
# Data tables. Countries with several capitals or a disputed capital are left out on purpose.
# --------------------------------------------------------------------------------------------

# (country as written in the question, "capital|aliases", "plausible wrong|...", difficulty)
CAPITALS = [
    ("France", "Paris", "Lyon|Marseille", E),
    ("Japan", "Tokyo", "Osaka|Kyoto", E),
    ("Germany", "Berlin", "Munich|Hamburg", E),
    ("Italy", "Rome|Roma", "Milan|Naples", E),
    ("Spain", "Madrid", "Barcelona|Seville", E),
    ("the United Kingdom", "London", "Manchester|Edinburgh", E),
    ("Russia", "Moscow", "Saint Petersburg|Novosibirsk", E),
    ("China", "Beijing|Peking", "Shanghai|Hong Kong", E),
    ("the United States", "Washington, D.C.|Washington|Washington DC", "New York City|Philadelphia", E),
    ("Egypt", "Cairo", "Alexandria|Giza", E),
    ("Greece", "Athens", "Thessaloniki|Sparta", E),
    ("Mexico", "Mexico City|Ciudad de Mexico", "Guadalajara|Monterrey", E),
    ("Ireland", "Dublin", "Cork|Belfast", E),
    ("Portugal", "Lisbon|Lisboa", "Porto|Coimbra", E),
    ("Austria", "Vienna|Wien", "Salzburg|Graz", E),
    ("Norway", "Oslo", "Bergen|Trondheim", E),
    ("Sweden", "Stockholm", "Gothenburg|Malmo", E),
    ("Denmark", "Copenhagen", "Aarhus|Odense", E),
    ("Argentina", "Buenos Aires", "Cordoba|Rosario", E),
    ("India", "New Delhi|Delhi", "Mumbai|Kolkata", E),
    ("Thailand", "Bangkok", "Chiang Mai|Phuket", E),
    ("South Korea", "Seoul", "Busan|Incheon", E),
    ("Poland", "Warsaw|Warszawa", "Krakow|Gdansk", E),
    ("Belgium", "Brussels|Bruxelles", "Antwerp|Bruges", E),
    ("Finland", "Helsinki", "Tampere|Turku", E),
    ("Cuba", "Havana|La Habana", "Santiago de Cuba|Varadero", E),
    ("Peru", "Lima", "Cusco|Arequipa", E),
    ("Canada", "Ottawa", "Toronto|Montreal", M),
    ("Australia", "Canberra", "Sydney|Melbourne", M),
    ("Brazil", "Brasilia|Brasília", "Rio de Janeiro|Sao Paulo", M),
    ("Turkey", "Ankara", "Istanbul|Izmir", M),
    ("Switzerland", "Bern|Berne", "Zurich|Geneva", M),
    ("New Zealand", "Wellington", "Auckland|Christchurch", M),
    ("Pakistan", "Islamabad", "Karachi|Lahore", M),
    ("Nigeria", "Abuja", "Lagos|Kano", M),
    ("Morocco", "Rabat", "Casablanca|Marrakesh", M),
    ("Vietnam", "Hanoi|Ha Noi", "Ho Chi Minh City|Da Nang", M),
    ("Kenya", "Nairobi", "Mombasa|Kisumu", M),
    ("Colombia", "Bogota|Bogotá", "Medellin|Cali", M),
    ("Chile", "Santiago|Santiago de Chile", "Valparaiso|Concepcion", M),
    ("Hungary", "Budapest", "Debrecen|Szeged", M),
    ("the Czech Republic", "Prague|Praha", "Brno|Ostrava", M),
    ("Romania", "Bucharest|Bucuresti", "Cluj-Napoca|Timisoara", M),
    ("Ukraine", "Kyiv|Kiev", "Kharkiv|Lviv", M),
    ("Iran", "Tehran|Teheran", "Isfahan|Shiraz", M),
    ("Saudi Arabia", "Riyadh", "Jeddah|Mecca", M),
    ("the Philippines", "Manila", "Cebu City|Davao City", M),
    ("Iceland", "Reykjavik|Reykjavík", "Akureyri|Keflavik", M),
    ("Ethiopia", "Addis Ababa", "Dire Dawa|Gondar", M),
    ("the United Arab Emirates", "Abu Dhabi", "Dubai|Sharjah", M),
    ("Algeria", "Algiers", "Oran|Constantine", H),
    ("Tunisia", "Tunis", "Sfax|Sousse", H),
    ("Burkina Faso", "Ouagadougou", "Bobo-Dioulasso|Koudougou", H),
    ("Kyrgyzstan", "Bishkek", "Osh|Karakol", H),
    ("Kazakhstan", "Astana|Nur-Sultan", "Almaty|Shymkent", H),
    ("Myanmar", "Naypyidaw|Naypyitaw|Nay Pyi Taw", "Yangon|Mandalay", H),
    ("Mongolia", "Ulaanbaatar|Ulan Bator|Ulaan Baatar", "Darkhan|Erdenet", H),
    ("Uzbekistan", "Tashkent", "Samarkand|Bukhara", H),
    ("Armenia", "Yerevan", "Gyumri|Vanadzor", H),
    ("the country Georgia", "Tbilisi", "Batumi|Kutaisi", H),
    ("Moldova", "Chisinau|Chișinău|Kishinev", "Balti|Tiraspol", H),
    ("Lithuania", "Vilnius", "Kaunas|Klaipeda", H),
    ("Latvia", "Riga", "Daugavpils|Liepaja", H),
    ("Estonia", "Tallinn", "Tartu|Parnu", H),
    ("Mali", "Bamako", "Timbuktu|Mopti", H),
    ("Senegal", "Dakar", "Saint-Louis|Touba", H),
    ("Madagascar", "Antananarivo", "Toamasina|Mahajanga", H),
    ("Mozambique", "Maputo", "Beira|Nampula", H),
    ("Zimbabwe", "Harare", "Bulawayo|Mutare", H),
    ("Angola", "Luanda", "Huambo|Lobito", H),
    ("Cameroon", "Yaounde|Yaoundé", "Douala|Garoua", H),
    ("Cambodia", "Phnom Penh", "Siem Reap|Battambang", H),
    ("Nepal", "Kathmandu", "Pokhara|Lalitpur", H),
    ("Paraguay", "Asuncion|Asunción", "Ciudad del Este|Encarnacion", H),
    ("Uruguay", "Montevideo", "Salto|Punta del Este", H),
]

# (country, "continent|aliases", "plausible wrong", difficulty); transcontinental countries omitted.
CONTINENTS = [
    ("France", "Europe", "Asia", E),
    ("Japan", "Asia", "Europe", E),
    ("Kenya", "Africa", "Asia", E),
    ("Brazil", "South America", "Africa|North America", E),
    ("Canada", "North America", "Europe|South America", E),
    ("Nigeria", "Africa", "Asia|South America", E),
    ("Peru", "South America", "Africa|North America", M),
    ("Vietnam", "Asia", "Africa|Europe", M),
    ("Poland", "Europe", "Asia", M),
    ("Argentina", "South America", "North America|Africa", M),
    ("Pakistan", "Asia", "Africa|Europe", M),
    ("Morocco", "Africa", "Asia|Europe", M),
    ("Ghana", "Africa", "Asia|South America", M),
    ("Venezuela", "South America", "North America|Africa", M),
    ("Suriname", "South America", "Africa|Asia", H),
    ("Guyana", "South America", "Africa|North America", H),
    ("Madagascar", "Africa", "Asia|Oceania", H),
    ("Laos", "Asia", "Africa|Oceania", H),
    ("Bhutan", "Asia", "Europe|Africa", H),
    ("Burkina Faso", "Africa", "Asia|South America", H),
    ("Eritrea", "Africa", "Asia|Europe", H),
    ("Moldova", "Europe", "Asia|Africa", H),
    ("Belarus", "Europe", "Asia", H),
    ("Paraguay", "South America", "Africa|North America", H),
    ("Botswana", "Africa", "Asia|Europe", H),
    ("Bangladesh", "Asia", "Africa|Europe", H),
    ("Djibouti", "Africa", "Asia|Europe", H),
    ("Costa Rica", "North America|Central America", "South America|Africa", H),
]

# (country, "language|aliases", "plausible wrong", difficulty); "main language spoken in ...".
LANGUAGES = [
    ("France", "French", "German|Italian", E),
    ("Germany", "German", "Dutch|French", E),
    ("Japan", "Japanese", "Chinese|Korean", E),
    ("Italy", "Italian", "Spanish|Latin", E),
    ("Spain", "Spanish|Castilian", "Portuguese|Italian", E),
    ("Russia", "Russian", "Ukrainian|Polish", E),
    ("Mexico", "Spanish", "Portuguese|English", E),
    ("the United States", "English", "Spanish|French", E),
    ("Portugal", "Portuguese", "Spanish|Italian", E),
    ("Greece", "Greek", "Turkish|Latin", E),
    ("South Korea", "Korean", "Japanese|Chinese", E),
    ("Turkey", "Turkish", "Arabic|Greek", E),
    ("Brazil", "Portuguese|Brazilian Portuguese", "Spanish|French", M),
    ("Argentina", "Spanish", "Portuguese|Italian", M),
    ("the Netherlands", "Dutch|Nederlands", "German|Danish", M),
    ("Iran", "Persian|Farsi", "Arabic|Turkish", M),
    ("Egypt", "Arabic|Egyptian Arabic", "Coptic|Persian", M),
    ("Israel", "Hebrew", "Yiddish|Greek", M),
    ("China", "Mandarin|Chinese|Mandarin Chinese|Standard Chinese", "Cantonese|Japanese", M),
    ("Vietnam", "Vietnamese", "Thai|Chinese", M),
    ("Thailand", "Thai", "Vietnamese|Lao", M),
    ("Poland", "Polish", "Czech|Russian", M),
    ("Sweden", "Swedish", "Norwegian|Danish", M),
    ("Finland", "Finnish", "Estonian|Norwegian", M),
    ("Saudi Arabia", "Arabic", "Persian|Urdu", M),
    ("Ukraine", "Ukrainian", "Polish|Belarusian", M),
    ("Denmark", "Danish", "Norwegian|Swedish", M),
    ("Norway", "Norwegian", "Swedish|Danish", M),
    ("Romania", "Romanian", "Hungarian|Bulgarian", M),
    ("Czechia", "Czech", "Slovak|Polish", M),
    ("Iceland", "Icelandic", "Danish|Norwegian", H),
    ("Hungary", "Hungarian|Magyar", "Romanian|Slovak", H),
    ("Bangladesh", "Bengali|Bangla", "Hindi|Urdu", H),
    ("Indonesia", "Indonesian|Bahasa Indonesia", "Malay|Javanese", H),
    ("Mongolia", "Mongolian", "Russian|Kazakh", H),
    ("the country Georgia", "Georgian", "Russian|Armenian", H),
    ("Armenia", "Armenian", "Georgian|Azerbaijani", H),
    ("Laos", "Lao|Laotian", "Thai|Khmer", H),
    ("Cambodia", "Khmer|Cambodian", "Thai|Vietnamese", H),
    ("Nepal", "Nepali|Nepalese", "Hindi|Tibetan", H),
    ("Angola", "Portuguese", "French|Swahili", H),
    ("Lithuania", "Lithuanian", "Latvian|Polish", H),
]

# (country, "currency|aliases", "plausible wrong", difficulty). Countries that changed currency
# recently (Croatia 2023, Bulgaria 2026) are left out.
CURRENCIES = [
    ("Japan", "yen|Japanese yen|JPY", "yuan|won", E),
    ("the United Kingdom", "pound sterling|pound|pounds|British pound|sterling|GBP", "euro|shilling", E),
    ("the United States", "US dollar|dollar|dollars|American dollar|USD", "euro|peso", E),
    ("Germany", "euro|euros|EUR", "Deutsche Mark|franc", E),
    ("France", "euro|euros|EUR", "franc|lira", E),
    ("India", "Indian rupee|rupee|rupees|INR", "taka|dinar", E),
    ("Italy", "euro|euros|EUR", "lira|franc", M),
    ("Spain", "euro|euros|EUR", "peseta|peso", M),
    ("China", "renminbi|yuan|Chinese yuan|RMB|CNY", "yen|won", M),
    ("Russia", "Russian ruble|ruble|rouble|Russian rouble|RUB", "hryvnia|zloty", M),
    ("Switzerland", "Swiss franc|franc|francs|CHF", "euro|mark", M),
    ("South Korea", "won|South Korean won|KRW", "yen|yuan", M),
    ("Mexico", "Mexican peso|peso|pesos|MXN", "dollar|real", M),
    ("Brazil", "Brazilian real|real|reais|BRL", "peso|cruzado", M),
    ("Canada", "Canadian dollar|dollar|dollars|CAD", "pound sterling|euro", M),
    ("Australia", "Australian dollar|dollar|dollars|AUD", "Australian pound|pound sterling", M),
    ("Turkey", "Turkish lira|lira|TRY", "dinar|drachma", M),
    ("South Africa", "South African rand|rand|ZAR", "shilling|naira", M),
    ("Greece", "euro|euros|EUR", "drachma|lira", M),
    ("the Netherlands", "euro|euros|EUR", "guilder|krone", M),
    ("Poland", "zloty|złoty|Polish zloty|PLN", "koruna|forint", H),
    ("Hungary", "forint|Hungarian forint|HUF", "zloty|koruna", H),
    ("the Czech Republic", "Czech koruna|koruna|Czech crown|crown|CZK", "zloty|forint", H),
    ("Sweden", "Swedish krona|krona|kronor|SEK", "krone|euro", H),
    ("Denmark", "Danish krone|krone|kroner|DKK", "krona|euro", H),
    ("Thailand", "baht|Thai baht|THB", "dong|ringgit", H),
    ("Vietnam", "dong|Vietnamese dong|đồng|VND", "baht|kip", H),
    ("Indonesia", "rupiah|Indonesian rupiah|IDR", "rupee|ringgit", H),
    ("Israel", "shekel|new shekel|Israeli new shekel|Israeli shekel|NIS|ILS", "dinar|lira", H),
    ("Saudi Arabia", "Saudi riyal|riyal|SAR", "dinar|dirham", H),
    ("the United Arab Emirates", "dirham|UAE dirham|Emirati dirham|AED", "riyal|dinar", H),
    ("Egypt", "Egyptian pound|pound|EGP", "dinar|dirham", H),
    ("Nigeria", "naira|Nigerian naira|NGN", "cedi|rand", H),
    ("Ukraine", "hryvnia|hryvnya|hryvna|Ukrainian hryvnia|UAH", "ruble|zloty", H),
    ("Morocco", "Moroccan dirham|dirham|MAD", "dinar|riyal", H),
    ("Bangladesh", "taka|Bangladeshi taka|BDT", "rupee|rupiah", H),
    ("Peru", "sol|soles|Peruvian sol|nuevo sol|PEN", "peso|real", H),
]

# (element, "symbol", "plausible wrong symbols", difficulty)
SYMBOLS = [
    ("hydrogen", "H", "He|Hy", E),
    ("oxygen", "O", "Ox|Os", E),
    ("carbon", "C", "Ca|Cb", E),
    ("nitrogen", "N", "Ni|Ne", E),
    ("helium", "He", "H|Hl", E),
    ("gold", "Au", "Ag|Go", E),
    ("silver", "Ag", "Au|Si", E),
    ("iron", "Fe", "Ir|In", E),
    ("sodium", "Na", "So|S", E),
    ("calcium", "Ca", "C|Cl", E),
    ("chlorine", "Cl", "Ch|C", E),
    ("sulfur", "S", "Su|Si", E),
    ("potassium", "K", "P|Po", M),
    ("lead", "Pb", "Le|Pd", M),
    ("copper", "Cu", "Co|Cp", M),
    ("mercury", "Hg", "Me|Mg", M),
    ("tin", "Sn", "Ti|Tn", M),
    ("neon", "Ne", "N|Na", M),
    ("magnesium", "Mg", "Mn|Ma", M),
    ("zinc", "Zn", "Zi|Z", M),
    ("aluminium", "Al", "Am|Au", M),
    ("silicon", "Si", "S|Sc", M),
    ("phosphorus", "P", "Ph|K", M),
    ("uranium", "U", "Ur|Un", M),
    ("iodine", "I", "Io|In", M),
    ("fluorine", "F", "Fl|Fr", M),
    ("tungsten", "W", "Tu|Tn", H),
    ("antimony", "Sb", "At|Sn", H),
    ("manganese", "Mn", "Mg|Ma", H),
    ("arsenic", "As", "Ar|Ac", H),
    ("argon", "Ar", "As|Ag", H),
    ("platinum", "Pt", "Pl|Pa", H),
    ("nickel", "Ni", "N|Nc", H),
    ("cobalt", "Co", "Cu|Cb", H),
    ("chromium", "Cr", "Ch|Co", H),
    ("bromine", "Br", "B|Be", H),
]

# (symbol, "element|aliases", "plausible wrong", difficulty): "Which element has the symbol X?"
ELEMENTS_FROM_SYMBOL = [
    ("O", "oxygen", "osmium|ozone", E),
    ("Fe", "iron", "fluorine|francium", M),
    ("Au", "gold", "silver|aluminium", M),
    ("Na", "sodium", "nitrogen|neon", M),
    ("Ag", "silver", "gold|argon", M),
    ("K", "potassium", "krypton|phosphorus", H),
    ("Pb", "lead", "platinum|palladium", H),
    ("Hg", "mercury", "hydrogen|helium", H),
    ("Sn", "tin", "sulfur|antimony", H),
    ("W", "tungsten|wolfram", "titanium|vanadium", H),
]

# (element, atomic number, difficulty): "What is the atomic number of X?"
ATOMIC_NUMBERS = [
    ("hydrogen", 1, E),
    ("helium", 2, M),
    ("carbon", 6, M),
    ("oxygen", 8, M),
    ("iron", 26, H),
    ("gold", 79, H),
    ("uranium", 92, H),
]

# (title, "author|aliases", "plausible wrong authors", difficulty): 'Who wrote "TITLE"?'.
# A full question (ending in "?") is used as is. Surname aliases are left out when a plausible
# wrong answer shares the surname (the Bronte sisters, the Shelleys).
AUTHORS = [
    ("Romeo and Juliet", "William Shakespeare|Shakespeare", "Christopher Marlowe|Ben Jonson", E),
    ("Harry Potter and the Philosopher's Stone", "J. K. Rowling|J.K. Rowling|JK Rowling|Rowling|Joanne Rowling",
     "Roald Dahl|Philip Pullman", E),
    ("Pride and Prejudice", "Jane Austen|Austen", "Charlotte Bronte|George Eliot", E),
    ("Oliver Twist", "Charles Dickens|Dickens", "William Makepeace Thackeray|Thomas Hardy", E),
    ("Animal Farm", "George Orwell|Orwell|Eric Blair", "Aldous Huxley|H. G. Wells", E),
    ("The Hobbit", "J. R. R. Tolkien|J.R.R. Tolkien|JRR Tolkien|Tolkien", "C. S. Lewis|Terry Pratchett", E),
    ("Dracula", "Bram Stoker|Stoker", "Mary Shelley|Edgar Allan Poe", E),
    ("The Adventures of Tom Sawyer", "Mark Twain|Twain|Samuel Clemens", "Jack London|Charles Dickens", E),
    ("Who wrote the epic poem \"The Odyssey\"?", "Homer", "Virgil|Sophocles", E),
    ("Who wrote \"On the Origin of Species\"?", "Charles Darwin|Darwin", "Alfred Russel Wallace|Gregor Mendel", E),
    ("Who created the detective Sherlock Holmes?", "Arthur Conan Doyle|Conan Doyle|Sir Arthur Conan Doyle",
     "Agatha Christie|Edgar Allan Poe", E),
    ("1984", "George Orwell|Orwell|Eric Blair", "Aldous Huxley|Ray Bradbury", M),
    ("Murder on the Orient Express", "Agatha Christie|Christie", "Arthur Conan Doyle|Dorothy L. Sayers", M),
    ("Don Quixote", "Miguel de Cervantes|Cervantes", "Lope de Vega|Federico Garcia Lorca", M),
    ("War and Peace", "Leo Tolstoy|Tolstoy|Lev Tolstoy", "Fyodor Dostoevsky|Anton Chekhov", M),
    ("Crime and Punishment", "Fyodor Dostoevsky|Dostoevsky|Dostoyevsky|Fyodor Dostoyevsky",
     "Leo Tolstoy|Ivan Turgenev", M),
    ("The Divine Comedy", "Dante Alighieri|Dante", "Petrarch|Giovanni Boccaccio", M),
    ("Moby-Dick", "Herman Melville|Melville", "Nathaniel Hawthorne|Jack London", M),
    ("The Great Gatsby", "F. Scott Fitzgerald|Scott Fitzgerald|Fitzgerald|F Scott Fitzgerald",
     "Ernest Hemingway|John Steinbeck", M),
    ("The Old Man and the Sea", "Ernest Hemingway|Hemingway", "John Steinbeck|Herman Melville", M),
    ("The Grapes of Wrath", "John Steinbeck|Steinbeck", "William Faulkner|Ernest Hemingway", M),
    ("To Kill a Mockingbird", "Harper Lee|Nelle Harper Lee", "Truman Capote|John Steinbeck", M),
    ("Frankenstein", "Mary Shelley|Mary Wollstonecraft Shelley", "Percy Bysshe Shelley|Bram Stoker", M),
    ("The Chronicles of Narnia", "C. S. Lewis|C.S. Lewis|CS Lewis|Lewis", "J. R. R. Tolkien|Roald Dahl", M),
    ("Les Miserables", "Victor Hugo|Hugo", "Alexandre Dumas|Emile Zola", M),
    ("The Three Musketeers", "Alexandre Dumas|Dumas", "Victor Hugo|Jules Verne", M),
    ("Brave New World", "Aldous Huxley|Huxley", "George Orwell|H. G. Wells", M),
    ("The Catcher in the Rye", "J. D. Salinger|J.D. Salinger|JD Salinger|Salinger", "Jack Kerouac|John Updike", M),
    ("Alice's Adventures in Wonderland", "Lewis Carroll|Carroll|Charles Dodgson|Charles Lutwidge Dodgson",
     "Edward Lear|Roald Dahl", M),
    ("Treasure Island", "Robert Louis Stevenson|Stevenson|R. L. Stevenson", "Walter Scott|Daniel Defoe", M),
    ("Twenty Thousand Leagues Under the Seas", "Jules Verne|Verne", "H. G. Wells|Victor Hugo", M),
    ("The War of the Worlds", "H. G. Wells|H.G. Wells|HG Wells|Wells|Herbert George Wells",
     "Jules Verne|Isaac Asimov", M),
    ("The Picture of Dorian Gray", "Oscar Wilde|Wilde", "Bram Stoker|Henry James", M),
    ("Fahrenheit 451", "Ray Bradbury|Bradbury", "George Orwell|Isaac Asimov", M),
    ("The Metamorphosis", "Franz Kafka|Kafka", "Hermann Hesse|Thomas Mann", M),
    ("Who wrote the poem \"The Raven\"?", "Edgar Allan Poe|Poe|Edgar Poe", "Nathaniel Hawthorne|Walt Whitman", M),
    ("Madame Bovary", "Gustave Flaubert|Flaubert", "Honore de Balzac|Emile Zola", H),
    ("One Hundred Years of Solitude", "Gabriel Garcia Marquez|Gabriel García Márquez|Garcia Marquez|Gabo",
     "Jorge Luis Borges|Mario Vargas Llosa", H),
    ("Faust", "Johann Wolfgang von Goethe|Goethe|Johann Wolfgang Goethe", "Friedrich Schiller|Heinrich Heine", H),
    ("Who wrote the 1922 novel \"Ulysses\"?", "James Joyce|Joyce", "Samuel Beckett|Virginia Woolf", H),
    ("Jane Eyre", "Charlotte Bronte|Charlotte Brontë", "Emily Bronte|Jane Austen", H),
    ("Wuthering Heights", "Emily Bronte|Emily Brontë", "Charlotte Bronte|Anne Bronte", H),
    ("The Canterbury Tales", "Geoffrey Chaucer|Chaucer", "John Gower|William Langland", H),
    ("The Little Prince", "Antoine de Saint-Exupery|Antoine de Saint-Exupéry|Saint-Exupery|Saint-Exupéry",
     "Jules Verne|Albert Camus", H),
    ("The Prince", "Niccolo Machiavelli|Niccolò Machiavelli|Machiavelli", "Dante Alighieri|Thomas More", H),
    ("The Art of War", "Sun Tzu|Sunzi|Sun Wu", "Confucius|Lao Tzu", H),
    ("Who wrote the 1942 novel \"The Stranger\"?", "Albert Camus|Camus", "Jean-Paul Sartre|Andre Gide", H),
    ("Dune", "Frank Herbert|Herbert", "Isaac Asimov|Arthur C. Clarke", H),
]

# (question, "artist|aliases", "plausible wrong", difficulty)
ART = [
    ("Who painted the Mona Lisa?", "Leonardo da Vinci|da Vinci|Leonardo|Leonardo Da Vinci", "Michelangelo|Raphael", E),
    ("Who painted \"The Starry Night\"?", "Vincent van Gogh|van Gogh|Vincent Van Gogh", "Paul Gauguin|Claude Monet", E),
    ("Who painted the ceiling of the Sistine Chapel?", "Michelangelo|Michelangelo Buonarroti",
     "Raphael|Leonardo da Vinci", E),
    ("Who painted \"The Last Supper\" in Milan?", "Leonardo da Vinci|da Vinci|Leonardo", "Michelangelo|Caravaggio", M),
    ("Who painted \"Guernica\"?", "Pablo Picasso|Picasso", "Salvador Dali|Joan Miro", M),
    ("Who painted \"The Persistence of Memory\", with its melting clocks?", "Salvador Dali|Dali|Salvador Dalí|Dalí",
     "Rene Magritte|Pablo Picasso", M),
    ("Who painted \"The Scream\"?", "Edvard Munch|Munch", "Gustav Klimt|Vincent van Gogh", M),
    ("Who painted the \"Water Lilies\" series?", "Claude Monet|Monet", "Edouard Manet|Pierre-Auguste Renoir", M),
    ("Who painted \"Sunflowers\" in Arles?", "Vincent van Gogh|van Gogh", "Paul Gauguin|Paul Cezanne", M),
    ("Who painted \"The Creation of Adam\"?", "Michelangelo|Michelangelo Buonarroti", "Raphael|Donatello", M),
    ("Who made the artwork \"Campbell's Soup Cans\"?", "Andy Warhol|Warhol", "Roy Lichtenstein|Jackson Pollock", M),
    ("Who painted \"The Birth of Venus\"?", "Sandro Botticelli|Botticelli", "Titian|Raphael", H),
    ("Who painted \"Girl with a Pearl Earring\"?", "Johannes Vermeer|Vermeer|Jan Vermeer", "Rembrandt|Frans Hals", H),
    ("Who painted \"The Night Watch\"?", "Rembrandt|Rembrandt van Rijn", "Johannes Vermeer|Frans Hals", H),
    ("Who painted \"The Kiss\", the golden painting in Vienna?", "Gustav Klimt|Klimt", "Egon Schiele|Edvard Munch", H),
    ("Who painted \"Impression, Sunrise\"?", "Claude Monet|Monet", "Edouard Manet|Camille Pissarro", H),
    ("Who painted \"The School of Athens\"?", "Raphael|Raffaello Sanzio|Raffaello", "Michelangelo|Titian", H),
    ("Who painted \"Las Meninas\"?", "Diego Velazquez|Velazquez|Diego Velázquez|Velázquez",
     "Francisco Goya|El Greco", H),
    ("Who painted \"The Third of May 1808\"?", "Francisco Goya|Goya|Francisco de Goya", "Diego Velazquez|El Greco", H),
    ("Who painted \"American Gothic\"?", "Grant Wood|Wood", "Edward Hopper|Norman Rockwell", H),
    ("Who painted \"Nighthawks\"?", "Edward Hopper|Hopper", "Grant Wood|Andrew Wyeth", H),
    ("Who painted \"The Son of Man\", a man with an apple in front of his face?",
     "Rene Magritte|Magritte|René Magritte",
     "Salvador Dali|Max Ernst", H),
    ("Who painted \"The Garden of Earthly Delights\"?", "Hieronymus Bosch|Bosch", "Pieter Bruegel|Jan van Eyck", H),
    ("Who painted \"Liberty Leading the People\"?", "Eugene Delacroix|Delacroix|Eugène Delacroix",
     "Jacques-Louis David|Theodore Gericault", H),
    ("Who made the woodblock print \"The Great Wave off Kanagawa\"?", "Hokusai|Katsushika Hokusai",
     "Hiroshige|Utamaro", H),
]

# (question, "person|aliases", "plausible wrong", difficulty)
SCIENCE = [
    ("Who invented the telephone?", "Alexander Graham Bell|Graham Bell|Bell", "Thomas Edison|Samuel Morse", E),
    ("Who developed the theory of relativity?", "Albert Einstein|Einstein", "Isaac Newton|Niels Bohr", E),
    ("Who formulated the three laws of motion and the law of universal gravitation?", "Isaac Newton|Newton",
     "Galileo Galilei|Albert Einstein", E),
    ("Who proposed the theory of evolution by natural selection?", "Charles Darwin|Darwin",
     "Jean-Baptiste Lamarck|Gregor Mendel", E),
    ("Which inventor is best known for the phonograph and the light bulb?", "Thomas Edison|Edison|Thomas Alva Edison",
     "Nikola Tesla|Alexander Graham Bell", E),
    ("Who discovered penicillin?", "Alexander Fleming|Fleming", "Louis Pasteur|Joseph Lister", M),
    ("Who invented the printing press with movable type in Europe?", "Johannes Gutenberg|Gutenberg",
     "William Caxton|Martin Luther", M),
    ("Which brothers made the first powered airplane flight?",
     "Wright brothers|Orville and Wilbur Wright|Wilbur and Orville Wright|Orville Wright|Wilbur Wright",
     "Montgolfier brothers|Lumiere brothers", M),
    ("Who invented dynamite?", "Alfred Nobel|Nobel", "Thomas Edison|Alfred Krupp", M),
    ("Who invented the World Wide Web?", "Tim Berners-Lee|Berners-Lee|Sir Tim Berners-Lee", "Bill Gates|Vint Cerf", M),
    ("Who created the periodic table of the elements?", "Dmitri Mendeleev|Mendeleev|Dmitri Mendeleyev",
     "Antoine Lavoisier|John Dalton", M),
    ("Who was the first woman to win a Nobel Prize?", "Marie Curie|Curie|Marie Sklodowska-Curie|Maria Sklodowska",
     "Rosalind Franklin|Lise Meitner", M),
    ("Who improved the steam engine by adding a separate condenser?", "James Watt|Watt",
     "George Stephenson|Robert Fulton", M),
    ("Which American inventor gave his name to the dot-and-dash telegraph code?",
     "Samuel Morse|Morse|Samuel F. B. Morse",
     "Alexander Graham Bell|Guglielmo Marconi", M),
    ("Who developed pasteurization?", "Louis Pasteur|Pasteur", "Robert Koch|Joseph Lister", M),
    ("Which German engineer invented the compression-ignition engine named after him?", "Rudolf Diesel|Diesel",
     "Karl Benz|Gottlieb Daimler", M),
    ("Who proposed that the Earth and planets orbit the Sun in his book of 1543?", "Nicolaus Copernicus|Copernicus",
     "Galileo Galilei|Ptolemy", M),
    ("Who discovered X-rays?", "Wilhelm Rontgen|Wilhelm Röntgen|Wilhelm Roentgen|Rontgen|Röntgen|Roentgen",
     "Henri Becquerel|Marie Curie", H),
    ("Who developed the first successful polio vaccine?", "Jonas Salk|Salk", "Louis Pasteur|Edward Jenner", H),
    ("Who created the first vaccine, against smallpox?", "Edward Jenner|Jenner", "Louis Pasteur|Jonas Salk", H),
    ("Who discovered the electron?", "J. J. Thomson|J.J. Thomson|JJ Thomson|Thomson|Joseph John Thomson",
     "Ernest Rutherford|Niels Bohr", H),
    ("Who discovered the atomic nucleus?", "Ernest Rutherford|Rutherford", "J. J. Thomson|Niels Bohr", H),
    ("Who formulated the three laws of planetary motion?", "Johannes Kepler|Kepler", "Tycho Brahe|Isaac Newton", H),
    ("Who discovered the four largest moons of Jupiter?", "Galileo Galilei|Galileo", "Johannes Kepler|Tycho Brahe", H),
    ("Who designed the Analytical Engine, an early mechanical computer?", "Charles Babbage|Babbage",
     "Ada Lovelace|Alan Turing", H),
    ("Who pioneered alternating current and the induction motor?", "Nikola Tesla|Tesla",
     "Thomas Edison|George Westinghouse", H),
    ("Who wrote \"Elements\", the classic ancient textbook of geometry?", "Euclid", "Pythagoras|Archimedes", H),
    ("Who discovered the laws of heredity by breeding pea plants?", "Gregor Mendel|Mendel",
     "Charles Darwin|Louis Pasteur", H),
]

# (question, "gold|aliases", "plausible wrong", difficulty, answer_type)
ASTRONOMY = [
    ("What is the largest planet in the Solar System?", "Jupiter", "Saturn|Neptune", E, "other"),
    ("Which planet is closest to the Sun?", "Mercury", "Venus|Mars", E, "other"),
    ("Which planet is known as the Red Planet?", "Mars", "Venus|Jupiter", E, "other"),
    ("How many planets are in the Solar System?", "8|eight", "9|7", E, "number"),
    ("Which planet is famous for its large, bright rings?", "Saturn", "Jupiter|Uranus", E, "other"),
    ("Which galaxy contains our Solar System?", "Milky Way|the Milky Way", "Andromeda|Triangulum", E, "other"),
    ("Who was the first person to walk on the Moon?", "Neil Armstrong|Armstrong", "Buzz Aldrin|Yuri Gagarin", E,
     "person"),
    ("How many moons does Earth have?", "1|one", "2|0", E, "number"),
    ("Which planet is the hottest in the Solar System?", "Venus", "Mercury|Mars", M, "other"),
    ("Which planet is the smallest in the Solar System?", "Mercury", "Mars|Pluto", M, "other"),
    ("Which planet is farthest from the Sun?", "Neptune", "Uranus|Pluto", M, "other"),
    ("How many moons does Mars have?", "2|two", "1|3", M, "number"),
    ("Which planet has the Great Red Spot?", "Jupiter", "Mars|Saturn", M, "other"),
    ("Which planet is often called Earth's twin because of its similar size?", "Venus", "Mars|Mercury", M, "other"),
    ("Which celestial body was reclassified as a dwarf planet in 2006?", "Pluto", "Ceres|Eris", M, "other"),
    ("Who was the first human to travel into space?", "Yuri Gagarin|Gagarin", "Alan Shepard|Neil Armstrong", M,
     "person"),
    ("What is the third planet from the Sun?", "Earth", "Mars|Venus", M, "other"),
    ("What is the largest moon of Saturn?", "Titan", "Enceladus|Rhea", H, "other"),
    ("What is the largest moon of Jupiter?", "Ganymede", "Europa|Callisto", H, "other"),
    ("Which planet rotates on its side, with an axis tilted about 98 degrees?", "Uranus", "Neptune|Saturn", H,
     "other"),
    ("Who was the first woman to travel into space?", "Valentina Tereshkova|Tereshkova",
     "Sally Ride|Svetlana Savitskaya",
     H, "person"),
    ("On which planet is Olympus Mons, the tallest volcano in the Solar System?", "Mars", "Venus|Jupiter", H, "other"),
    ("Which planet has the shortest day in the Solar System?", "Jupiter", "Mercury|Saturn", H, "other"),
    ("What is the name of Mars's larger moon?", "Phobos", "Deimos|Titan", H, "other"),
    ("Who was the second person to walk on the Moon?", "Buzz Aldrin|Aldrin|Edwin Aldrin",
     "Michael Collins|Neil Armstrong", H, "person"),
    ("How many planets in the Solar System are larger than Earth?", "4|four", "3|5", H, "number"),
]

# (event phrase for "In what year ...?", year, "plausible wrong years", difficulty)
HISTORY_YEARS = [
    ("did the Apollo 11 mission first land people on the Moon", 1969, "1968|1971", E),
    ("did World War II end", 1945, "1944|1946", E),
    ("did World War I begin", 1914, "1912|1918", E),
    ("did World War II begin", 1939, "1941|1938", E),
    ("was the United States Declaration of Independence signed", 1776, "1789|1783", E),
    ("did the September 11 attacks take place in the United States", 2001, "2000|2003", E),
    ("did the World Health Organization declare COVID-19 a pandemic", 2020, "2019|2021", E),
    ("did World War I end", 1918, "1919|1917", M),
    ("did the Berlin Wall fall", 1989, "1991|1990", M),
    ("did the French Revolution begin with the storming of the Bastille", 1789, "1776|1799", M),
    ("did Christopher Columbus first reach the Americas", 1492, "1498|1500", M),
    ("did the Titanic sink", 1912, "1914|1911", M),
    ("did the Russian October Revolution take place", 1917, "1918|1905", M),
    ("did the Soviet Union dissolve", 1991, "1989|1990", M),
    ("did Japan attack Pearl Harbor", 1941, "1942|1939", M),
    ("was John F. Kennedy assassinated", 1963, "1965|1962", M),
    ("did the Allied D-Day landings in Normandy take place", 1944, "1945|1943", M),
    ("was the first iPhone released", 2007, "2008|2006", M),
    ("did the Chernobyl nuclear disaster happen", 1986, "1984|1988", M),
    ("did India gain independence from Britain", 1947, "1948|1950", M),
    ("did the United Kingdom vote to leave the European Union in a referendum", 2016, "2020|2015", M),
    ("was Barack Obama first elected President of the United States", 2008, "2009|2012", M),
    ("did the Battle of Hastings take place", 1066, "1067|1086", H),
    ("was the Magna Carta sealed", 1215, "1225|1265", H),
    ("did Constantinople fall to the Ottoman Turks", 1453, "1492|1456", H),
    ("was the Battle of Waterloo fought", 1815, "1812|1805", H),
    ("did Martin Luther publish his Ninety-five Theses", 1517, "1521|1492", H),
    ("did the American Civil War begin", 1861, "1865|1860", H),
    ("did euro banknotes and coins enter circulation", 2002, "1999|2001", H),
    ("was Nelson Mandela released from prison", 1990, "1994|1989", H),
    ("were East and West Germany reunified", 1990, "1989|1991", H),
    ("did the Wright brothers make their first powered flight", 1903, "1905|1899", H),
    ("was Napoleon crowned Emperor of the French", 1804, "1799|1815", H),
    ("was the People's Republic of China founded", 1949, "1948|1950", H),
    ("was the Treaty of Versailles signed", 1919, "1918|1920", H),
    ("did the Great Fire of London happen", 1666, "1665|1680", H),
    ("did the Spanish Armada sail against England", 1588, "1558|1590", H),
    ("did the Soviet Union launch Sputnik 1", 1957, "1961|1958", H),
    ("did Yuri Gagarin become the first human in space", 1961, "1957|1963", H),
    ("did the Cuban Missile Crisis take place", 1962, "1961|1963", H),
]

# (question, "person|aliases", "plausible wrong", difficulty)
HISTORY_PEOPLE = [
    ("Who was the first President of the United States?", "George Washington", "John Adams|Thomas Jefferson", E),
    ("Which French emperor was defeated at the Battle of Waterloo?", "Napoleon|Napoleon Bonaparte|Napoleon I",
     "Louis XIV|Charles de Gaulle", E),
    ("Who gave the \"I Have a Dream\" speech in 1963?", "Martin Luther King Jr.|Martin Luther King|MLK",
     "Malcolm X|Rosa Parks", E),
    ("Who was the President of the United States during the American Civil War?", "Abraham Lincoln|Lincoln",
     "Ulysses S. Grant|George Washington", E),
    ("Who led India's non-violent independence movement and is called the Mahatma?",
     "Mahatma Gandhi|Gandhi|Mohandas Gandhi|Mohandas Karamchand Gandhi", "Jawaharlal Nehru|Muhammad Ali Jinnah", E),
    ("Who was the British Prime Minister for most of World War II?", "Winston Churchill|Churchill",
     "Neville Chamberlain|Clement Attlee", M),
    ("Who led the Soviet Union during World War II?", "Joseph Stalin|Stalin", "Vladimir Lenin|Nikita Khrushchev", M),
    ("Who was the first female Prime Minister of the United Kingdom?", "Margaret Thatcher|Thatcher",
     "Theresa May|Queen Elizabeth II", M),
    ("Who founded the Mongol Empire?", "Genghis Khan|Chinggis Khan|Temujin", "Kublai Khan|Attila", M),
    ("Which boy pharaoh's nearly intact tomb was discovered in 1922?", "Tutankhamun|Tutankhamen|King Tut",
     "Ramesses II|Cleopatra", M),
    ("Who led the Bolshevik Revolution in Russia in 1917?", "Vladimir Lenin|Lenin", "Joseph Stalin|Leon Trotsky", M),
    ("Who was the first Roman emperor?", "Augustus|Caesar Augustus|Octavian", "Julius Caesar|Nero", H),
    ("Who was the first Chancellor of the German Empire in 1871?", "Otto von Bismarck|Bismarck",
     "Wilhelm I|Frederick the Great", H),
    ("Which English queen reigned when the Spanish Armada was defeated?", "Elizabeth I|Queen Elizabeth I|Elizabeth",
     "Mary I|Queen Victoria", H),
    ("Who was the first emperor of a unified China?", "Qin Shi Huang|Qin Shi Huangdi|Shi Huangdi",
     "Kublai Khan|Sun Yat-sen", H),
    ("Who was the last Tsar of Russia?", "Nicholas II|Tsar Nicholas II|Nicholas", "Alexander III|Peter the Great", H),
    ("Who led the first expedition to reach the South Pole?", "Roald Amundsen|Amundsen",
     "Robert Falcon Scott|Ernest Shackleton", H),
    ("Which Macedonian king conquered the Persian Empire in the 4th century BC?",
     "Alexander the Great|Alexander III of Macedon|Alexander", "Philip II|Darius III", H),
]

# (question, "gold|aliases", "plausible wrong", difficulty, answer_type)
ANIMALS = [
    ("How many legs does a spider have?", "8|eight", "6|10", E, "number"),
    ("How many legs does an insect have?", "6|six", "8|4", E, "number"),
    ("How many arms does an octopus have?", "8|eight", "10|6", E, "number"),
    ("What is the largest mammal on Earth?", "blue whale|the blue whale", "African elephant|sperm whale", E, "other"),
    ("What is the tallest animal in the world?", "giraffe|the giraffe", "elephant|ostrich", E, "other"),
    ("What is the fastest land animal?", "cheetah|the cheetah", "lion|pronghorn", E, "other"),
    ("What is the largest land animal?", "African elephant|elephant|African bush elephant", "giraffe|hippopotamus",
     E, "other"),
    ("What do giant pandas mainly eat?", "bamboo", "eucalyptus|fish", E, "other"),
    ("Which animal is known as the \"king of the jungle\"?", "lion|the lion", "tiger|gorilla", E, "other"),
    ("Which animal is called the \"ship of the desert\"?", "camel|the camel", "horse|donkey", E, "other"),
    ("Which insect makes honey?", "bee|bees|honeybee|honey bee", "wasp|hornet", E, "other"),
    ("What is a baby cat called?", "kitten", "cub|puppy", E, "other"),
    ("What is the largest bird in the world?", "ostrich|the ostrich", "emu|albatross", M, "other"),
    ("How many arms does a typical starfish have?", "5|five", "6|8", M, "number"),
    ("How many chambers does the human heart have?", "4|four", "2|3", M, "number"),
    ("How many teeth does an adult human have in a full set?", "32|thirty-two", "28|30", M, "number"),
    ("What is a baby kangaroo called?", "joey", "cub|kit", M, "other"),
    ("What is a baby frog called?", "tadpole|polliwog", "fry|cub", M, "other"),
    ("What is a group of lions called?", "pride", "pack|herd", M, "other"),
    ("What is the only mammal capable of true sustained flight?", "bat|the bat|bats", "flying squirrel|sugar glider",
     M, "other"),
    ("What do koalas mainly eat?", "eucalyptus|eucalyptus leaves|gum leaves", "bamboo|grass", M, "other"),
    ("What is the largest fish in the world?", "whale shark|the whale shark", "great white shark|blue whale", M,
     "other"),
    ("What is the largest species of cat?", "tiger|the tiger|Siberian tiger", "lion|jaguar", M, "other"),
    ("How many humps does a Bactrian camel have?", "2|two", "1|3", M, "number"),
    ("What kind of animal is a Komodo dragon?", "lizard|monitor lizard|monitor", "snake|crocodile", M, "other"),
    ("What is a baby horse called?", "foal", "calf|lamb", M, "other"),
    ("How many hearts does an octopus have?", "3|three", "2|1", H, "number"),
    ("How many bones are in the adult human body?", "206", "208|212", H, "number"),
    ("How many humps does a dromedary camel have?", "1|one", "2|3", H, "number"),
    ("How many wings does a honeybee have?", "4|four", "2|6", H, "number"),
    ("What is a baby swan called?", "cygnet", "gosling|duckling", H, "other"),
    ("What is a baby goose called?", "gosling", "cygnet|duckling", H, "other"),
    ("What is the largest living reptile?", "saltwater crocodile|estuarine crocodile|crocodile",
     "Komodo dragon|green anaconda", H, "other"),
    ("Which bird is the fastest animal when diving?", "peregrine falcon|peregrine|falcon", "golden eagle|swift", H,
     "other"),
]

# (question, value, "plausible wrong values", difficulty): units, shapes, games and other numbers.
NUMBERS = [
    ("How many days are there in a leap year?", 366, "365|364", E),
    ("How many minutes are there in an hour?", 60, "100|30", E),
    ("How many hours are there in a day?", 24, "12|20", E),
    ("How many days are there in a week?", 7, "5|6", E),
    ("How many months are there in a year?", 12, "10|13", E),
    ("How many centimeters are there in a meter?", 100, "10|1000", E),
    ("How many grams are there in a kilogram?", 1000, "100|10000", E),
    ("How many sides does a hexagon have?", 6, "8|5", E),
    ("How many degrees are there in a right angle?", 90, "180|45", E),
    ("How many items are there in a dozen?", 12, "10|13", E),
    ("How many cards are in a standard deck of playing cards, without jokers?", 52, "54|48", E),
    ("How many letters are there in the English alphabet?", 26, "24|28", E),
    ("How many rings are on the Olympic flag?", 5, "6|4", E),
    ("How many states are there in the United States?", 50, "48|52", E),
    ("How many seconds are there in an hour?", 3600, "360|6000", M),
    ("How many millimeters are there in a centimeter?", 10, "100|1000", M),
    ("How many inches are there in a foot?", 12, "10|16", M),
    ("How many feet are there in a yard?", 3, "2|4", M),
    ("At what temperature in degrees Celsius does water boil at sea level?", 100, "90|212", M),
    ("At what temperature in degrees Fahrenheit does water freeze?", 32, "0|30", M),
    ("How many sides does an octagon have?", 8, "6|10", M),
    ("What is the sum of the interior angles of a triangle in degrees?", 180, "360|90", M),
    ("How many players from one team are on the field in a soccer match?", 11, "10|12", M),
    ("How many players from one team are on the court in basketball?", 5, "6|7", M),
    ("How many strings does a standard guitar have?", 6, "5|7", M),
    ("How many squares are there on a chessboard?", 64, "81|100", M),
    ("How many bits are there in a byte?", 8, "16|4", M),
    ("What is the smallest prime number?", 2, "1|3", M),
    ("What number does the Roman numeral X represent?", 10, "5|100", M),
    ("How many stripes are on the flag of the United States?", 13, "50|12", M),
    ("At what temperature in degrees Fahrenheit does water boil at sea level?", 212, "100|200", H),
    ("How many ounces are there in a pound?", 16, "12|10", H),
    ("How many feet are there in a mile?", 5280, "5000|1760", H),
    ("How many sides does a heptagon have?", 7, "6|9", H),
    ("How many items are there in a gross?", 144, "100|120", H),
    ("How many items are there in a baker's dozen?", 13, "12|14", H),
    ("How many keys does a standard piano have?", 88, "76|96", H),
    ("How many players from one team are on the field in baseball?", 9, "11|10", H),
    ("How many players from one team are on the field in rugby union?", 15, "13|11", H),
    ("What number does the Roman numeral L represent?", 50, "100|500", H),
    ("What number does the Roman numeral D represent?", 500, "1000|50", H),
    ("What number does the Roman numeral XL represent?", 40, "60|400", H),
    ("How many pieces does each player have at the start of a chess game?", 16, "12|18", H),
]

# (question, "place|aliases", "plausible wrong", difficulty)
LANDMARKS = [
    ("In which city is the Eiffel Tower?", "Paris", "Lyon|London", E),
    ("In which city is the Colosseum?", "Rome", "Athens|Milan", E),
    ("In which city is the Statue of Liberty?", "New York City|New York|NYC", "Washington, D.C.|Boston", E),
    ("In which city is Big Ben?", "London", "Manchester|Edinburgh", E),
    ("In which country are the pyramids of Giza?", "Egypt", "Sudan|Mexico", E),
    ("In which city is the Kremlin with Red Square?", "Moscow", "Saint Petersburg|Kyiv", E),
    ("In which city is the Acropolis?", "Athens", "Rome|Sparta", E),
    ("In which country is the Great Barrier Reef?", "Australia", "New Zealand|Indonesia", E),
    ("In which country is Machu Picchu?", "Peru", "Bolivia|Mexico", M),
    ("In which city is the Golden Gate Bridge?", "San Francisco", "Los Angeles|Seattle", M),
    ("In which city is the Christ the Redeemer statue?", "Rio de Janeiro|Rio", "Sao Paulo|Brasilia", M),
    ("In which city is the famous Leaning Tower?", "Pisa", "Florence|Venice", M),
    ("In which city is the Sagrada Familia basilica?", "Barcelona", "Madrid|Seville", M),
    ("In which city is the Brandenburg Gate?", "Berlin", "Munich|Vienna", M),
    ("In which country is Stonehenge?", "England|United Kingdom|UK|Britain|Great Britain", "Ireland|France", M),
    ("In which city is the Taj Mahal?", "Agra", "New Delhi|Jaipur", H),
    ("In which country is the ancient city of Petra?", "Jordan", "Egypt|Syria", H),
    ("In which country is the temple complex of Angkor Wat?", "Cambodia", "Thailand|Vietnam", H),
    ("In which city is the Alhambra palace?", "Granada", "Seville|Cordoba", H),
    ("In which city is the Hagia Sophia?", "Istanbul", "Athens|Ankara", H),
    ("In which country is the Mayan city of Chichen Itza?", "Mexico", "Guatemala|Peru", H),
    ("In which country is Neuschwanstein Castle?", "Germany", "Austria|Switzerland", H),
    ("In which city is the Forbidden City palace complex?", "Beijing|Peking", "Shanghai|Xi'an", M),
]

# (question, "gold|aliases", "plausible wrong", difficulty, answer_type)
GEOGRAPHY = [
    ("What is the largest ocean on Earth?", "Pacific Ocean|Pacific|the Pacific", "Atlantic Ocean|Indian Ocean", E,
     "place"),
    ("What is the highest mountain in the world above sea level?", "Mount Everest|Everest", "K2|Kangchenjunga", E,
     "place"),
    ("What is the largest country in the world by area?", "Russia", "Canada|China", E, "place"),
    ("What is the largest continent by area?", "Asia", "Africa|North America", E, "place"),
    ("On which continent is the Sahara Desert?", "Africa", "Asia|Australia", E, "place"),
    ("On which continent is the Amazon rainforest?", "South America", "Africa|Asia", E, "place"),
    ("What is the smallest country in the world by area?", "Vatican City|Vatican|Holy See", "Monaco|San Marino", M,
     "place"),
    ("What is the smallest continent by area?", "Australia|Oceania", "Europe|Antarctica", M, "place"),
    ("What is the largest hot desert in the world?", "Sahara|Sahara Desert|the Sahara", "Arabian Desert|Gobi Desert",
     M, "place"),
    ("Which of the Great Lakes is the largest?", "Lake Superior|Superior", "Lake Michigan|Lake Huron", M, "place"),
    ("What is the largest island in the world?", "Greenland", "New Guinea|Borneo", M, "place"),
    ("What is the second highest mountain in the world?", "K2|Mount Godwin-Austen", "Kangchenjunga|Mount Everest", H,
     "place"),
    ("What is the deepest lake in the world?", "Lake Baikal|Baikal", "Lake Tanganyika|Lake Superior", H, "place"),
    ("What is the longest river in Europe?", "Volga|Volga River|the Volga", "Danube|Rhine", H, "place"),
    ("What is the highest waterfall in the world?", "Angel Falls|Salto Angel", "Victoria Falls|Niagara Falls", H,
     "place"),
    ("What is the longest mountain range on land?", "Andes|the Andes|Andes Mountains", "Himalayas|Rocky Mountains",
     H, "place"),
    ("Which continent has the most countries?", "Africa", "Europe|Asia", H, "place"),
    ("Which strait separates Europe from Africa at Spain and Morocco?", "Strait of Gibraltar|Gibraltar",
     "Strait of Messina|Bosphorus", H, "place"),
]


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

_ARTICLES = {"a", "an", "the"}


def normalize_answer(text: str) -> str:
    """Return ``text`` lower-cased, without accents, punctuation or articles, spaces collapsed.

    "The Milky Way!" -> "milky way"; "N'Djamena" -> "n djamena"; "" -> "".
    """
    decomposed = unicodedata.normalize("NFKD", str(text))
    no_accents = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    words = re.sub(r"[^\w\s]|_", " ", no_accents.lower()).split()
    return " ".join(w for w in words if w not in _ARTICLES)


def squad_form(text: str) -> str:
    """Return ``text`` in SQuAD style: lower-cased, punctuation deleted (not spaced), accents kept,
    articles dropped. "J.K. Rowling" -> "jk rowling". Used to check that no wrong answer collides
    with a gold alias under this second common normalisation either."""
    text = unicodedata.normalize("NFKC", str(text)).lower()
    text = "".join(ch for ch in text if not unicodedata.category(ch).startswith("P"))
    return " ".join(w for w in text.split() if w not in _ARTICLES)


def _collides(wrong: str, answers: list[str]) -> bool:
    """True when ``wrong`` equals, or contains on word boundaries, a gold alias under either
    normalisation (:func:`normalize_answer` or :func:`squad_form`)."""
    for form in (normalize_answer, squad_form):
        w = form(wrong)
        if not w:
            return True
        for answer in answers:
            g = form(answer)
            if g and f" {g} " in f" {w} ":
                return True
    return False


def _split(field: str) -> list[str]:
    """Split a ``"a|b|c"`` table field into a list of stripped, non-empty strings."""
    items = [part.strip() for part in field.split("|")]
    if not items or any(not item for item in items):
        raise ValueError(f"empty entry in table field {field!r}")
    return items


def _row(question: str, answers: str | list[str], wrong: str | list[str], difficulty: str,
         category: str, answer_type: str) -> dict:
    """Build one row (without id and wrong_type) and check it.

    Returns a dict; raises ValueError when the difficulty or answer type is unknown, or when a
    plausible wrong answer equals a gold alias or contains one as whole words, under either
    normalisation (so exact and containment checkers cannot confuse them).
    """
    answers = _split(answers) if isinstance(answers, str) else list(answers)
    wrong = _split(wrong) if isinstance(wrong, str) else list(wrong)
    if difficulty not in (E, M, H):
        raise ValueError(f"unknown difficulty {difficulty!r} for {question!r}")
    if answer_type not in ANSWER_TYPES:
        raise ValueError(f"unknown answer_type {answer_type!r} for {question!r}")
    if any(not normalize_answer(a) or not squad_form(a) for a in answers):
        raise ValueError(f"an answer of {question!r} normalises to the empty string")
    for w in wrong:
        if _collides(w, answers):
            raise ValueError(f"plausible wrong answer {w!r} matches a gold answer of {question!r}")
    return {
        "question": question,
        "answers": answers,
        "plausible_wrong": wrong,
        "category": category,
        "difficulty": difficulty,
        "answer_type": answer_type,
    }


def _quoted_question(template: str, subject: str) -> str:
    """Return ``subject`` itself when it is a full question, else ``template`` filled with it."""
    return subject if subject.endswith("?") else template.format(subject)


# (operation, count, difficulty, operand ranges): the arithmetic of the hand-written rows ...
ARITHMETIC = [
    ("+", 8, E, (2, 9), (2, 9)),
    ("times", 5, E, (2, 5), (2, 5)),
    ("-", 5, E, (10, 19), (2, 9)),
    ("+", 8, M, (11, 49), (11, 49)),
    ("-", 6, M, (50, 99), (11, 49)),
    ("times", 6, M, (6, 12), (6, 9)),
    ("+", 6, H, (100, 999), (100, 999)),
    ("-", 5, H, (4000, 9999), (1000, 3999)),
    ("times", 6, H, (11, 49), (11, 49)),
    ("divided by", 4, H, (6, 19), (11, 29)),
    ("sqrt", 3, H, (11, 25), (0, 0)),
]
# ... and of the generated ones (questions already in the set are dropped afterwards)
MORE_ARITHMETIC = [
    ("+", 40, E, (2, 20), (2, 20)),
    ("-", 25, E, (10, 30), (2, 9)),
    ("times", 20, E, (2, 9), (2, 9)),
    ("+", 30, M, (11, 99), (11, 99)),
    ("-", 25, M, (50, 199), (11, 49)),
    ("times", 25, M, (6, 15), (3, 9)),
    ("+", 20, H, (100, 999), (100, 999)),
    ("-", 15, H, (1000, 9999), (100, 999)),
    ("times", 20, H, (11, 99), (11, 49)),
    ("divided by", 10, H, (6, 19), (11, 49)),
    ("sqrt", 8, H, (11, 40), (0, 0)),
]


def _arithmetic_rows(rng: random.Random, specs: list[tuple] = ARITHMETIC) -> list[dict]:
    """Generate arithmetic questions of growing size from ``specs``; every result is computed here.

    Returns rows of category "arithmetic" and answer_type "number". Plausible wrong answers are
    near misses (off by one or ten, or one factor off by one), never the true result.
    """
    rows: list[dict] = []
    seen: set[tuple[str, int, int]] = set()
    for op, count, difficulty, (lo_a, hi_a), (lo_b, hi_b) in specs:
        made = 0
        while made < count:
            a, b = rng.randint(lo_a, hi_a), rng.randint(lo_b, hi_b)
            if op == "+":
                question, result = f"What is {a} + {b}?", a + b
                near = [result + 1, result - 1, result + 10, result - 10]
            elif op == "-":
                question, result = f"What is {a} - {b}?", a - b
                near = [result + 1, result - 1, result + 10, result - 10, a + b]
            elif op == "times":
                question, result = f"What is {a} times {b}?", a * b
                near = [a * (b - 1), (a + 1) * b, result + 10, result - 10]
            elif op == "divided by":
                # b is the quotient; the dividend a*b divides exactly.
                question, result = f"What is {a * b} divided by {a}?", b
                near = [b + 1, b - 1, b + 2]
            else:
                question, result = f"What is the square root of {a * a}?", a
                near = [a + 1, a - 1, a * 2]
            if str(result) in re.findall(r"\d+", question):
                continue  # e.g. 16 - 8 = 8: repeating the question must not look like an answer
            # a + b and b + a (a times b, b times a) count as the same question.
            key = (op, min(a, b), max(a, b)) if op in ("+", "times") else (op, a, b)
            if key in seen:
                continue
            seen.add(key)
            candidates = sorted({n for n in near if n > 0 and n != result})
            wrong = [str(n) for n in rng.sample(candidates, 2)]
            rows.append(_row(question, [str(result)], wrong, difficulty, "arithmetic", "number"))
            made += 1
    return rows


_NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty"
).split()


def _number_answers(value: int) -> list[str]:
    """Gold answers for a count: its digits first, then its English word when ``value <= 20``."""
    return [str(value)] + ([_NUMBER_WORDS[value]] if 0 <= value < len(_NUMBER_WORDS) else [])


# --------------------------------------------------------------------------------------------
# Generated rows with graded difficulty (questions 601 onwards). Every answer is computed here;
# the hand-written tables above stay the first 600 rows, unchanged, so that stores collected on
# them resume.
# --------------------------------------------------------------------------------------------

_ROMAN = ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"),
          (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"))
_ORDINALS = ("first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
             "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth "
             "twentieth").split()
_COUNT_WORDS = ("zero one two three four five six seven eight nine ten").split()
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")
_MONTH_DAYS = {"January": 31, "March": 31, "April": 30, "May": 31, "June": 30, "July": 31,
               "August": 31, "September": 30, "October": 31, "November": 30, "December": 31}
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

# (singular, "plural|aliases", difficulty): irregular plurals; wrong answers are the regular forms.
PLURALS = [
    ("child", "children", E), ("mouse", "mice", E), ("man", "men", E), ("woman", "women", E),
    ("tooth", "teeth", E), ("foot", "feet", E), ("goose", "geese", E), ("person", "people|persons", E),
    ("leaf", "leaves", E), ("knife", "knives", E), ("wolf", "wolves", E), ("half", "halves", E),
    ("baby", "babies", E), ("city", "cities", E), ("box", "boxes", E), ("life", "lives", E),
    ("ox", "oxen", M), ("louse", "lice", M), ("calf", "calves", M),
    ("shelf", "shelves", M), ("thief", "thieves", M), ("loaf", "loaves", M), ("elf", "elves", M),
    ("wife", "wives", M), ("potato", "potatoes", M), ("tomato", "tomatoes", M), ("hero", "heroes", M),
    ("echo", "echoes", M), ("quiz", "quizzes", M), ("cherry", "cherries", M), ("bus", "buses|busses", M),
    ("crisis", "crises", H), ("thesis", "theses", H), ("analysis", "analyses", H),
    ("hypothesis", "hypotheses", H), ("diagnosis", "diagnoses", H), ("oasis", "oases", H),
    ("axis", "axes", H), ("criterion", "criteria", H), ("phenomenon", "phenomena", H),
    ("bacterium", "bacteria", H), ("datum", "data", H), ("fungus", "fungi|funguses", H),
    ("nucleus", "nuclei", H), ("stimulus", "stimuli", H), ("alumnus", "alumni", H),
    ("larva", "larvae", H), ("vertebra", "vertebrae", H), ("radius", "radii|radiuses", H),
    ("matrix", "matrices|matrixes", H), ("vortex", "vortices|vortexes", H),
    ("appendix", "appendices|appendixes", H), ("index", "indices|indexes", H),
    ("parenthesis", "parentheses", H), ("ellipsis", "ellipses", H), ("cactus", "cacti|cactuses", H),
]

# (word, "opposite|aliases", "plausible wrong", difficulty): pairs with one clear opposite.
OPPOSITES = [
    ("hot", "cold", "warm|cool", E), ("up", "down", "over|under", E), ("day", "night", "evening|dawn", E),
    ("left", "right", "center|straight", E), ("black", "white", "gray|dark", E),
    ("north", "south", "east|west", E), ("east", "west", "north|south", E),
    ("open", "closed|shut", "locked|ajar", E), ("yes", "no", "maybe|perhaps", E),
    ("inside", "outside", "within|under", E), ("top", "bottom", "middle|side", E),
    ("first", "last", "second|middle", E), ("full", "empty", "half|hollow", E),
    ("fast", "slow", "quick|steady", E), ("early", "late", "soon|on time", E),
    ("wet", "dry", "damp|moist", E), ("push", "pull", "shove|press", E), ("buy", "sell", "pay|trade", E),
    ("rich", "poor", "wealthy|broke", E), ("win", "lose", "draw|tie", E),
    ("question", "answer", "reply|query", M), ("ancient", "modern", "old|antique", M),
    ("victory", "defeat", "triumph|draw", M), ("arrival", "departure", "entrance|exit", M),
    ("maximum", "minimum", "average|medium", M), ("increase", "decrease", "grow|expand", M),
    ("import", "export", "trade|transport", M), ("visible", "invisible", "hidden|clear", M),
    ("temporary", "permanent", "brief|short", M), ("expand", "contract", "grow|stretch", M),
    ("ascend", "descend", "climb|rise", M), ("major", "minor", "large|small", M),
    ("innocent", "guilty", "naive|pure", M), ("optimist", "pessimist", "realist|idealist", M),
    ("synonym", "antonym", "homonym|acronym", H), ("convex", "concave", "flat|curved", H),
    ("acid", "base|alkali", "salt|water", H), ("zenith", "nadir", "summit|horizon", H),
    ("vertical", "horizontal", "diagonal|upright", M), ("exhale", "inhale", "breathe|sigh", M),
    ("ally", "enemy|foe", "friend|partner", M), ("frequently", "rarely|seldom|infrequently", "often|sometimes", M),
    ("generous", "stingy|selfish|mean", "kind|giving", H), ("benevolent", "malevolent", "kind|benign", H),
    ("prologue", "epilogue", "preface|chapter", H), ("ancestor", "descendant", "parent|relative", H),
    ("cathode", "anode", "diode|electrode", H), ("transparent", "opaque", "clear|translucent", H),
]

# Nouns with a regular plural (computed by :func:`_regular_plural`), and verbs with a regular
# past tense (computed by :func:`_regular_past`): easy word forms.
REGULAR_NOUNS = (
    "book car dog tree chair table bird door window pen cup shoe hat bed boat ship train road river "
    "lake hill star cloud flower plant egg bag ball bell coat desk lamp map toy king queen farm girl "
    "friend song word name hand arm leg eye ear nose room wall cake bike coin rock ring gift drum "
    "frog duck horse cow pig goat lion tiger bear snake shark whale rabbit monkey key day boy "
    "dish brush watch church fox glass class kiss match beach bench peach wish dress bush lunch tax "
    "party story lady puppy berry family country body penny army library "
    "apple banana orange lemon grape carrot onion bean cookie sandwich pizza candle clock phone "
    "camera radio computer picture pillow blanket basket bottle bucket button chain "
    "cap crown doll feather fork spoon plate bowl jar kettle ladder mirror needle pencil "
    "rope saddle scarf sock glove sweater jacket boot tent truck plane rocket island castle "
    "tower bridge street town village forest desert ocean planet animal insect spider eagle "
    "parrot owl dolphin turtle zebra camel donkey kitten teacher doctor farmer singer driver "
    "student baker painter sailor soldier brother sister uncle cousin neighbor guest "
).split()
REGULAR_VERBS = (
    "walk play jump talk open clean cook help call ask look work watch want start visit paint climb "
    "rain kick pull push fill turn wait listen answer follow enjoy stay laugh dance love like live move "
    "smile close hope use bake carry cry study try hurry marry worry copy stop plan drop hop shop clap "
    "hug rob nod beg"
).split()
_DOUBLED = {"stop", "plan", "drop", "hop", "shop", "clap", "hug", "rob", "nod", "beg"}

# (verb, "past tense|aliases", difficulty): irregular verbs.
IRREGULAR_PAST = [
    ("go", "went", E), ("eat", "ate", E), ("see", "saw", E), ("take", "took", E), ("give", "gave", E),
    ("come", "came", E), ("run", "ran", E), ("swim", "swam", E), ("sing", "sang", E), ("drink", "drank", E),
    ("write", "wrote", E), ("speak", "spoke", E), ("break", "broke", E), ("drive", "drove", E),
    ("buy", "bought", E), ("think", "thought", E), ("make", "made", E), ("say", "said", E),
    ("find", "found", E), ("sleep", "slept", E), ("get", "got", E), ("win", "won", E), ("sit", "sat", E),
    ("choose", "chose", M), ("ride", "rode", M), ("fly", "flew", M), ("grow", "grew", M), ("know", "knew", M),
    ("throw", "threw", M), ("draw", "drew", M), ("begin", "began", M), ("stand", "stood", M),
    ("understand", "understood", M), ("bring", "brought", M), ("fight", "fought", M), ("catch", "caught", M),
    ("teach", "taught", M), ("sell", "sold", M), ("tell", "told", M), ("hold", "held", M), ("feel", "felt", M),
    ("keep", "kept", M), ("leave", "left", M), ("meet", "met", M), ("lose", "lost", M), ("send", "sent", M),
    ("spend", "spent", M), ("build", "built", M), ("pay", "paid", M), ("hear", "heard", M), ("wear", "wore", M),
    ("steal", "stole", M), ("freeze", "froze", M), ("forget", "forgot", M), ("fall", "fell", M),
    ("shake", "shook", M), ("wake", "woke|waked", M), ("blow", "blew", M), ("ring", "rang", M), ("sink", "sank", M),
    ("tear", "tore", H), ("dig", "dug", H), ("bite", "bit", H), ("hide", "hid", H), ("lead", "led", H),
    ("feed", "fed", H), ("bleed", "bled", H), ("forgive", "forgave", H), ("rise", "rose", H), ("weep", "wept", H),
    ("swear", "swore", H), ("sting", "stung", H), ("swing", "swung", H), ("seek", "sought", H),
    ("slide", "slid", H), ("strike", "struck", H), ("spin", "spun", H), ("lay", "laid", H),
]

# Adjectives with regular comparative and superlative forms (computed by :func:`_compare`), and
# irregular ones: (adjective, "comparative|aliases", "superlative|aliases", difficulty).
REGULAR_ADJECTIVES = (
    "tall short long small fast slow old young cold warm soft hard loud quiet rich poor clean "
    "dark bright cheap deep high low kind light near new quick sharp smart strong weak thick thin "
    "big hot wet sad fat fit happy easy busy early funny heavy pretty angry lucky dirty large wide "
    "nice safe late brave wise close"
).split()
IRREGULAR_ADJECTIVES = [
    ("good", "better", "best", M), ("bad", "worse", "worst", M), ("far", "farther|further", "farthest|furthest", H),
    ("little", "less|littler", "least|littlest", H), ("many", "more", "most", H), ("much", "more", "most", H),
]

# Words whose letters are counted (common words of 3-13 letters).
COUNT_WORDS = (
    "cat dog sun tree house apple river mountain elephant computer library butterfly chocolate "
    "umbrella adventure telephone dinosaur kangaroo pineapple hospital triangle vegetable "
    "orchestra newspaper astronaut basketball strawberry helicopter microscope watermelon "
    "photograph university encyclopedia refrigerator thermometer calculator television "
    "government restaurant dictionary experiment volcano penguin giraffe island bridge castle "
    "garden window pencil rabbit"
).split()


def _regular_plural(noun: str) -> str:
    """box -> boxes, party -> parties, day -> days, book -> books."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _regular_past(verb: str) -> str:
    """walk -> walked, dance -> danced, carry -> carried, stop -> stopped, play -> played."""
    if verb in _DOUBLED:
        return verb + verb[-1] + "ed"
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


def _compare(adjective: str) -> tuple[str, str]:
    """Regular comparative and superlative: tall -> (taller, tallest), big -> (bigger, biggest),
    happy -> (happier, happiest), nice -> (nicer, nicest)."""
    stem = adjective
    if adjective.endswith("e"):
        stem = adjective[:-1]
    elif adjective.endswith("y") and adjective[-2] not in "aeiou":
        stem = adjective[:-1] + "i"
    elif (len(adjective) == 3 and adjective[-1] not in "aeiouwy" and adjective[-2] in "aeiou"
          and adjective[-3] not in "aeiou"):
        stem = adjective + adjective[-1]  # big -> bigg-er
    return stem + "er", stem + "est"


def _roman(value: int) -> str:
    """``value`` (1..3999) in Roman numerals: 14 -> "XIV"."""
    out = []
    for amount, symbol in _ROMAN:
        count, value = divmod(value, amount)
        out.append(symbol * count)
    return "".join(out)


def _ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 11 -> "11th", 23 -> "23rd"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _echoes(question: str, answers: list[str]) -> bool:
    """True when a gold alias occurs in the question on word boundaries (either normalisation)
    or, for a number, among the question's numbers: repeating the question would look right."""
    for form in (normalize_answer, squad_form):
        q = f" {form(question)} "
        if any(f" {form(a)} " in q for a in answers):
            return True
    return any(a in re.findall(r"\d+", question) for a in answers)


def _number_row(question: str, value: int, near: Iterable[int], difficulty: str, category: str,
                rng: random.Random) -> dict | None:
    """A row whose gold is ``value`` (digits, and the word up to twenty), with two plausible wrong
    numbers drawn from ``near``; ``None`` when the question echoes the answer."""
    answers = _number_answers(value)
    if _echoes(question, answers):
        return None
    candidates = sorted({n for n in near if n >= 0 and n != value})
    return _row(question, answers, [str(n) for n in rng.sample(candidates, 2)], difficulty, category, "number")


def _draw(rng: random.Random, make, count: int, tries: int = 50) -> list[dict]:
    """``count`` distinct rows from ``make(rng)`` (which returns a row or None), in draw order."""
    out: list[dict] = []
    seen: set[str] = set()
    for _ in range(count * tries):
        if len(out) == count:
            return out
        row = make(rng)
        if row is not None and row["question"] not in seen:
            seen.add(row["question"])
            out.append(row)
    raise ValueError(f"could not draw {count} distinct rows (got {len(out)})")


def _roman_rows(rng: random.Random) -> list[dict]:
    """'What number does the Roman numeral XIV stand for?': easy up to 12, medium up to 100,
    hard up to 3999."""
    rows = []
    for difficulty, lo, hi, count in ((E, 1, 12, 12), (M, 13, 100, 28), (H, 101, 3999, 30)):
        def make(rng, lo=lo, hi=hi, difficulty=difficulty):
            v = rng.randint(lo, hi)
            return _number_row(f"What number does the Roman numeral {_roman(v)} stand for?", v,
                               [v + 1, v - 1, v + 10, v - 10, v + 100], difficulty, "roman_numeral", rng)
        rows += _draw(rng, make, count)
    return rows


def _sequence_rows(rng: random.Random) -> list[dict]:
    """'What number comes next in the sequence 3, 6, 9, 12?': counting steps (easy), larger or
    descending steps (medium), doubling, tripling, squares, growing steps, Fibonacci-like (hard)."""
    def arithmetic(rng, difficulty):
        if difficulty == E:
            start, step = rng.randint(1, 20), rng.randint(1, 5)
        else:
            start, step = rng.randint(20, 200), rng.choice([-1, 1]) * rng.randint(6, 25)
        terms = [start + k * step for k in range(5)]
        if min(terms) < 0:
            return None
        return terms[:4], terms[4], [terms[4] + step, terms[4] + 1, terms[3], terms[4] - 1]

    def growing(rng, difficulty):
        kind = rng.choice(["double", "triple", "square", "triangular", "fibonacci"])
        if kind == "square":
            k = rng.randint(1, 12)
            terms = [(k + i) ** 2 for i in range(5)]
        elif kind == "triangular":  # differences 1, 2, 3, 4
            a = rng.randint(1, 50)
            terms = [a, a + 1, a + 3, a + 6, a + 10]
        elif kind == "fibonacci":  # each term the sum of the two before
            terms = [rng.randint(1, 9), rng.randint(1, 9)]
            while len(terms) < 5:
                terms.append(terms[-1] + terms[-2])
        else:
            ratio = 2 if kind == "double" else 3
            start = rng.randint(1, 12)
            terms = [start * ratio ** i for i in range(5)]
        step = terms[3] - terms[2]
        return terms[:4], terms[4], [terms[3] + step, terms[4] + 1, terms[4] - 1, terms[4] + step]

    rows = []
    for difficulty, count, kind in ((E, 40, arithmetic), (M, 40, arithmetic), (H, 40, growing)):
        def make(rng, difficulty=difficulty, kind=kind):
            made = kind(rng, difficulty)
            if made is None:
                return None
            shown, value, near = made
            question = f"What number comes next in the sequence {', '.join(map(str, shown))}?"
            return _number_row(question, value, near, difficulty, "sequence", rng)
        rows += _draw(rng, make, count)
    return rows


def _alphabet_rows(rng: random.Random) -> list[dict]:
    """Letters: right after (easy), right before (medium), the n-th letter (hard). "A" is never
    an answer or a wrong answer (an article, it normalises to nothing)."""
    def letters(*indices: int) -> list[str]:
        return [_LETTERS[i % 26] for i in indices if _LETTERS[i % 26] != "A"][:2]

    rows = []
    for i, letter in enumerate(_LETTERS):
        if 1 <= i + 1 < 26:
            rows.append(_row(f"Which letter comes right after {letter} in the English alphabet?",
                             [_LETTERS[i + 1]], letters(i + 2, i, i + 3), E, "alphabet", "other"))
        if i >= 2:
            rows.append(_row(f"Which letter comes right before {letter} in the English alphabet?",
                             [_LETTERS[i - 1]], letters(i - 2, i + 1, i), M, "alphabet", "other"))
        if i >= 1:
            rows.append(_row(f"What is the {_ordinal(i + 1)} letter of the English alphabet?", [letter],
                             letters(i - 1, i + 1, i + 2), H, "alphabet", "other"))
    return rows


def _calendar_rows(rng: random.Random) -> list[dict]:
    """Days and months: the next one (easy), n steps on or back (medium), the n-th month and days
    in a month (medium/hard)."""
    rows = []
    for seq, what in ((_DAYS, "day of the week"), (_MONTHS, "month")):
        n = len(seq)
        for i, name in enumerate(seq):
            rows.append(_row(f"Which {what} comes right after {name}?", [seq[(i + 1) % n]],
                             [seq[(i + 2) % n], seq[i - 1]], E, "calendar", "other"))
            rows.append(_row(f"Which {what} comes right before {name}?", [seq[i - 1]],
                             [seq[(i + 1) % n], seq[i - 2]], M, "calendar", "other"))
            for steps in (2, 3) if what.startswith("day") else (3,):
                word = _COUNT_WORDS[steps]
                unit = "days" if what.startswith("day") else "months"
                rows.append(_row(f"Which {what} is {word} {unit} after {name}?", [seq[(i + steps) % n]],
                                 [seq[(i + steps + 1) % n], seq[(i + steps - 1) % n]], H, "calendar", "other"))
    for i, month in enumerate(_MONTHS):
        rows.append(_row(f"What is the {_ORDINALS[i]} month of the year?", [month],
                         [_MONTHS[i - 1], _MONTHS[(i + 1) % 12]], M, "calendar", "other"))
        if month in _MONTH_DAYS:
            days = _MONTH_DAYS[month]
            rows.append(_row(f"How many days are there in {month}?", [str(days)],
                             [str(61 - days), "28"], H if month not in ("January", "December") else M,
                             "calendar", "number"))
    return rows


# (question template, factor, unit range for easy, medium, hard)
_UNITS = [
    ("How many centimeters are there in {n} meters?", 100),
    ("How many millimeters are there in {n} centimeters?", 10),
    ("How many meters are there in {n} kilometers?", 1000),
    ("How many grams are there in {n} kilograms?", 1000),
    ("How many minutes are there in {n} hours?", 60),
    ("How many seconds are there in {n} minutes?", 60),
    ("How many hours are there in {n} days?", 24),
    ("How many days are there in {n} weeks?", 7),
    ("How many months are there in {n} years?", 12),
    ("How many seconds are there in {n} hours?", 3600),
    ("How many inches are there in {n} feet?", 12),
    ("How many years are there in {n} centuries?", 100),
]


def _unit_rows(rng: random.Random) -> list[dict]:
    """Unit conversions: easy, 2-9 of a x10 / x100 / x1000 unit; medium, 2-9 of the others;
    hard, 11-99 of any (disjoint, so no question repeats across difficulties)."""
    decimal = [u for u in _UNITS if u[1] in (10, 100, 1000)]
    other = [u for u in _UNITS if u[1] not in (10, 100, 1000)]
    rows = []
    for difficulty, count, units, lo, hi in ((E, 20, decimal, 2, 9), (M, 25, other, 2, 9),
                                             (H, 25, _UNITS, 11, 99)):
        def make(rng, units=units, difficulty=difficulty, lo=lo, hi=hi):
            template, factor = rng.choice(units)
            n = rng.randint(lo, hi)
            value = n * factor
            return _number_row(template.format(n=n), value, [value + factor, value - factor, value * 10, n * 10 + 1],
                               difficulty, "units", rng)
        rows += _draw(rng, make, count)
    return rows


def _percent_rows(rng: random.Random) -> list[dict]:
    """Fractions and percentages of a number, all exact: half / a quarter (easy), 10% / a third
    (medium), 15% / 35% / 75% / three quarters (hard)."""
    specs = {
        E: [("half of {n}", 1, 2), ("a quarter of {n}", 1, 4)],
        M: [("10% of {n}", 1, 10), ("a third of {n}", 1, 3), ("20% of {n}", 1, 5)],
        H: [("15% of {n}", 3, 20), ("35% of {n}", 7, 20), ("three quarters of {n}", 3, 4), ("60% of {n}", 3, 5)],
    }
    rows = []
    for difficulty, count, lo, hi in ((E, 20, 2, 60), (M, 20, 3, 90), (H, 20, 3, 60)):
        def make(rng, difficulty=difficulty, lo=lo, hi=hi):
            phrase, num, den = rng.choice(specs[difficulty])
            n = rng.randint(lo, hi) * den
            value = n * num // den
            return _number_row(f"What is {phrase.format(n=n)}?", value,
                               [value + num, value - num, value * 2, n // den if num > 1 else value + 10],
                               difficulty, "percent", rng)
        rows += _draw(rng, make, count)
    return rows


def _power_rows(rng: random.Random) -> list[dict]:
    """Squares (easy to 10, medium to 20), cubes and powers of two (hard)."""
    rows = []
    for k in range(2, 21):
        rows.append(_number_row(f"What is {k} squared?", k * k, [k * 2, k * k + k, (k + 1) ** 2],
                                E if k <= 10 else M, "powers", rng))
    for k in range(2, 11):
        rows.append(_number_row(f"What is {k} cubed?", k ** 3, [k * 3, k * k, (k + 1) ** 3], H, "powers", rng))
    for k in range(3, 17):
        rows.append(_number_row(f"What is 2 to the power of {k}?", 2 ** k, [2 * k, 2 ** (k - 1), 2 ** (k + 1)],
                                H, "powers", rng))
    return [r for r in rows if r is not None]


_COUNTRY_ALIASES = {"United States": "United States|USA|United States of America|US",
                    "United Kingdom": "United Kingdom|UK|Britain|Great Britain",
                    "Czech Republic": "Czech Republic|Czechia",
                    "United Arab Emirates": "United Arab Emirates|UAE"}


def _reverse_capital_rows(rng: random.Random) -> list[dict]:
    """'Which country has Paris as its capital?' from :data:`CAPITALS` (same difficulty); the
    wrong answers are two other countries of the table. Capitals named after their country
    (Mexico City) are left out: the question would hold the answer."""
    names = [re.sub(r"^the (country )?", "", c) for c, _, _, _ in CAPITALS]
    rows = []
    for name, (_, capitals, _, difficulty) in zip(names, CAPITALS):
        question = f"Which country has {_split(capitals)[0]} as its capital?"
        answers = _split(_COUNTRY_ALIASES.get(name, name))
        if _echoes(question, answers):
            continue
        others = [c for c in names if c != name and not _collides(c, answers)]
        rows.append(_row(question, answers, rng.sample(others, 2), difficulty, "capital_reverse", "place"))
    return rows


def _word_rows(rng: random.Random) -> list[dict]:
    """Plurals, past tenses, comparatives and superlatives (regular: computed; irregular: from
    the tables), opposites and letter counts."""
    rows = []
    for word, plural, difficulty in PLURALS:
        answers = _split(plural)
        regular = [word + "s", word + "es"]
        wrong = [w for w in regular if not _collides(w, answers)][:2]
        if len(wrong) < 2:
            wrong.append(word + "en")
        rows.append(_row(f'What is the plural of "{word}"?', answers, wrong, difficulty, "plural", "other"))
    for noun in REGULAR_NOUNS:
        plural = _regular_plural(noun)
        naive = next(w for w in (noun + "es", noun + "s", noun + "en") if w != plural)
        rows.append(_row(f'What is the plural of "{noun}"?', [plural], [noun, naive], E, "plural", "other"))
    for verb in REGULAR_VERBS:
        past = _regular_past(verb)
        simple = past == verb + "ed" or past == verb + "d"
        rows.append(_row(f'What is the past tense of "{verb}"?', [past], [verb + "ing", verb + "s"],
                         E if simple else M, "past_tense", "other"))
    for verb, past, difficulty in IRREGULAR_PAST:
        answers = _split(past)
        wrong = [w for w in (_regular_past(verb), verb + "ing", verb + "s") if not _collides(w, answers)][:2]
        rows.append(_row(f'What is the past tense of "{verb}"?', answers, wrong, difficulty, "past_tense", "other"))
    for adjective in REGULAR_ADJECTIVES:
        comparative, superlative = _compare(adjective)
        doubled_or_changed = not comparative.startswith(adjective) or comparative[len(adjective)] != "e"
        difficulty = M if doubled_or_changed and not adjective.endswith("e") else E
        rows.append(_row(f'What is the comparative form of "{adjective}"?', [comparative],
                         [superlative, "more " + adjective], difficulty, "comparison", "other"))
        rows.append(_row(f'What is the superlative form of "{adjective}"?', [superlative],
                         [comparative, "most " + adjective], difficulty, "comparison", "other"))
    for adjective, comparative, superlative, difficulty in IRREGULAR_ADJECTIVES:
        regular = _compare(adjective)
        for form, gold, other, naive in (("comparative", comparative, superlative, regular[0]),
                                         ("superlative", superlative, comparative, regular[1])):
            answers = _split(gold)
            wrong = [w for w in (_split(other)[0], naive, f"{'more' if form == 'comparative' else 'most'} {adjective}")
                     if not _collides(w, answers)][:2]
            rows.append(_row(f'What is the {form} form of "{adjective}"?', answers, wrong, difficulty,
                             "comparison", "other"))
    for word, opposite, wrong, difficulty in OPPOSITES:
        rows.append(_row(f'What is the opposite of "{word}"?', opposite, wrong, difficulty, "opposite", "other"))
    for word in COUNT_WORDS:
        n = len(word)
        difficulty = E if n <= 4 else M if n <= 8 else H
        rows.append(_number_row(f'How many letters are there in the word "{word}"?', n, [n - 1, n + 1, n + 2],
                                difficulty, "letter_count", rng))
    return [r for r in rows if r is not None]


def graded_rows(seed: int = SEED, existing: Iterable[str] = ()) -> list[dict]:
    """The generated rows (without ids and wrong_type), in category order; questions in
    ``existing`` are left out. Deterministic for a given ``seed``."""
    rng = random.Random(seed + 2)
    rows: list[dict] = []
    for make in (_roman_rows, _sequence_rows, _alphabet_rows, _calendar_rows, _unit_rows,
                 _percent_rows, _power_rows, _reverse_capital_rows, _word_rows):
        rows += make(rng)
    existing = set(existing)
    rows += [r for r in _arithmetic_rows(random.Random(seed + 3), MORE_ARITHMETIC)
             if r["question"] not in existing]
    return rows


def build_rows(seed: int = SEED) -> list[dict]:
    """Build every row of the question set, with ids and wrong_type answers.

    Returns a list of dicts sorted by id (``q-0001``, ...). Deterministic for a given ``seed``.
    Raises ValueError on a duplicated question or when a row has no possible wrong_type.
    """
    rng = random.Random(seed)
    rows: list[dict] = []
    rows += [_row(f"What is the capital of {c}?", a, w, d, "capital", "place") for c, a, w, d in CAPITALS]
    rows += [_row(f"On which continent is {c}?", a, w, d, "continent", "place") for c, a, w, d in CONTINENTS]
    rows += [_row(f"What is the main language spoken in {c}?", a, w, d, "language", "other")
             for c, a, w, d in LANGUAGES]
    rows += [_row(f"What is the currency of {c}?", a, w, d, "currency", "other") for c, a, w, d in CURRENCIES]
    rows += [_row(f"What is the chemical symbol for {el}?", a, w, d, "chemistry", "other")
             for el, a, w, d in SYMBOLS]
    rows += [_row(f"Which chemical element has the symbol {s}?", a, w, d, "chemistry", "other")
             for s, a, w, d in ELEMENTS_FROM_SYMBOL]
    rows += [_row(f"What is the atomic number of {el}?", _number_answers(z), [str(z + 1), str(z - 1 or z + 2)],
                  d, "chemistry", "number") for el, z, d in ATOMIC_NUMBERS]
    rows += [_row(q, a, w, d, "astronomy", t) for q, a, w, d, t in ASTRONOMY]
    rows += [_row(_quoted_question('Who wrote "{}"?', t), a, w, d, "author", "person") for t, a, w, d in AUTHORS]
    rows += [_row(q, a, w, d, "art", "person") for q, a, w, d in ART]
    rows += [_row(q, a, w, d, "science", "person") for q, a, w, d in SCIENCE]
    rows += [_row(f"In what year {event}?", [str(y)], w, d, "history_year", "date")
             for event, y, w, d in HISTORY_YEARS]
    rows += [_row(q, a, w, d, "history_person", "person") for q, a, w, d in HISTORY_PEOPLE]
    rows += [_row(q, a, w, d, "animal", t) for q, a, w, d, t in ANIMALS]
    rows += [_row(q, _number_answers(v), w, d, "numbers", "number") for q, v, w, d in NUMBERS]
    rows += _arithmetic_rows(random.Random(seed + 1))
    rows += [_row(q, a, w, d, "landmark", "place") for q, a, w, d in LANDMARKS]
    rows += [_row(q, a, w, d, "geography", t) for q, a, w, d, t in GEOGRAPHY]

    _assign_wrong_types(rows, rng)  # the hand-written rows keep the wrong-type answers they always had
    extra = graded_rows(seed, existing=[r["question"] for r in rows])
    _assign_wrong_types(extra, random.Random(seed + 4), pool_rows=rows + extra)
    rows += extra

    questions = collections.Counter(r["question"] for r in rows)
    dupes = sorted(q for q, n in questions.items() if n > 1)
    if dupes:
        raise ValueError(f"duplicated questions: {dupes}")
    out = []
    for i, row in enumerate(rows, start=1):
        out.append({
            "id": f"q-{i:04d}",
            "question": row["question"],
            "answers": row["answers"],
            "plausible_wrong": row["plausible_wrong"],
            "wrong_type": row["wrong_type"],
            "category": row["category"],
            "difficulty": row["difficulty"],
            "answer_type": row["answer_type"],
        })
    return out


def _assign_wrong_types(rows: list[dict], rng: random.Random, pool_rows: list[dict] | None = None) -> None:
    """Set ``row["wrong_type"]`` for every row of ``rows``, in place.

    The candidate pool for a row of type T holds the first gold answer of every row of
    ``pool_rows`` (default ``rows``) whose type is in ``WRONG_TYPE_SOURCES[T]``, minus any string
    that (under either normalisation) is also a gold alias of some row of type T, so the chosen
    answer is unambiguously of another type.
    """
    aliases_by_type: dict[str, set[str]] = {t: set() for t in ANSWER_TYPES}
    golds_by_type: dict[str, list[str]] = {t: [] for t in ANSWER_TYPES}
    for row in rows if pool_rows is None else pool_rows:
        for form in (normalize_answer, squad_form):
            aliases_by_type[row["answer_type"]].update(form(a) for a in row["answers"])
        if row["answers"][0] not in golds_by_type[row["answer_type"]]:
            golds_by_type[row["answer_type"]].append(row["answers"][0])
    pools: dict[str, list[str]] = {}
    for t, sources in WRONG_TYPE_SOURCES.items():
        pool = [g for s in sources for g in golds_by_type[s]]
        pools[t] = sorted({g for g in pool if normalize_answer(g) not in aliases_by_type[t]
                           and squad_form(g) not in aliases_by_type[t]})
    for row in rows:
        pool = pools[row["answer_type"]]
        if not pool:
            raise ValueError(f"no wrong_type candidate for {row['question']!r}")
        row["wrong_type"] = rng.choice(pool)


def write_jsonl(rows: Iterable[dict], path: Path) -> None:
    """Write ``rows`` as UTF-8 JSON lines (one object per line, ``\\n`` endings) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_bytes(text.encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSONL path (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=SEED, help="random seed (default: %(default)s)")
    args = parser.parse_args(argv)
    rows = build_rows(args.seed)
    write_jsonl(rows, args.out)
    print(f"wrote {len(rows)} questions to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
