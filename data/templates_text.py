"""Text templates and slot lists for the training prompts (original text, Apache-2.0).

A template is a ``str.format`` string. Each ``{field}`` is filled from ``SLOTS[field]``; a field
that ends in a digit (``{city2}``) draws from the list without the digit (``city``) and gets a value
different from the other fields of that list. A slot value may be a tuple, indexed in the template
(``{email[0]}``). Follow-up templates (second user turns) are filled with the same values.
"""

from __future__ import annotations

from .template import T

# ------------------------------------------------------------------------------------ slot lists
SLOTS: dict[str, list] = {}

# ----------------------------------------------------------------------------------- writing
SLOTS["poem_form"] = [
    "haiku", "free-verse poem", "limerick", "short rhyming poem", "villanelle", "ballad",
    "acrostic poem", "poem of four quatrains", "prose poem", "tanka", "ode", "couplet-based poem",
]
SLOTS["poem_topic"] = [
    "the first snowfall of winter", "a grandmother's kitchen", "the sound of rain on a tin roof",
    "a city at four in the morning", "a lost umbrella", "an old oak tree in a schoolyard",
    "moving to a new country", "nurses on the night shift", "a cat watching birds through a window",
    "the last day of summer vacation", "a desert after rain", "learning to ride a bicycle",
    "a farewell at a train station", "the smell of fresh bread", "a forgotten attic",
    "bees in a lavender field", "the ocean at low tide", "the final mile of a marathon",
    "fog rolling over a harbor", "an empty playground in November", "a vegetable garden in spring",
    "the moon over a mountain lake", "a long-distance friendship", "coffee on a Monday morning",
    "an approaching thunderstorm", "fireflies in July", "a retired teacher's memories",
    "the hum of a refrigerator at midnight", "a kite stuck in a tree", "a volcano waking up",
    "a snowed-in cabin", "geese migrating south", "a saxophone player on a subway platform",
    "a pair of worn-out hiking boots", "a letter that was never sent", "a quiet fishing village",
    "the view from a hospital window", "a lemon tree on a balcony", "the first day at a new job",
    "a power outage on a summer night", "a swing hanging from a maple", "sunrise over wheat fields",
]
SLOTS["poem_tone"] = [
    "melancholy", "joyful", "playful", "nostalgic", "hopeful", "slightly eerie", "gentle",
    "funny", "bittersweet", "triumphant",
]
SLOTS["poem_constraint"] = [
    "Keep it under twelve lines.", "Please make it rhyme.", "Avoid clichés if you can.",
    "It's going into a handmade card.", "Use vivid sensory details.",
    "No more than three stanzas, please.", "Make every line start with a verb.",
    "I'd like it to end on a hopeful note.", "Write it in the second person.",
    "Keep the language simple enough for a child.",
]
SLOTS["story_premise"] = [
    "a retired astronaut who opens a bakery", "two rival food truck owners forced to share a parking lot",
    "a girl who finds a map sewn into her late grandfather's coat", "a robot that is afraid of the dark",
    "a town where it has not rained for ten years", "a mail carrier who reads one letter too many",
    "a chef who suddenly loses his sense of taste", "an island where every clock runs backwards",
    "a dog that waits at the same bus stop every afternoon", "a heist at a small-town museum that goes wrong",
    "an elevator that stops at a floor that doesn't exist", "a beekeeper who inherits a mysterious hive",
    "a ghost who wants to move out of the house it haunts", "a teenager who starts a podcast about local legends",
    "two strangers stranded at a bus depot during a blizzard", "a translator who discovers a secret in a diary",
    "a gardener whose plants grow overnight into something strange", "a lottery ticket found inside a library book",
    "a detective who solves crimes only by listening to recordings", "a tailor who sews memories into coats",
    "a colony ship that wakes its crew a century too early", "a small orchestra stranded in a mountain hotel",
    "an old woman who teaches her neighbors to build boats", "a village that votes on its weather each year",
    "a cartographer hired to map a city that keeps changing", "a boy who befriends the moon",
    "a night-shift janitor who finds a door to another world", "a famous magician who forgets how his best trick works",
    "a pair of twins who swap lives for a week", "a radio host who receives calls from the future",
    "a clockmaker's apprentice who breaks a very important clock", "an octopus that escapes from an aquarium",
    "a grandfather and granddaughter restoring a vintage motorcycle", "a courier delivering a package across a desert",
    "a scientist who accidentally shrinks her own laboratory", "a shy dragon who runs a tea shop",
]
SLOTS["story_length"] = ["150", "200", "250", "300", "400", "500"]
SLOTS["genre"] = [
    "science fiction", "fantasy", "romance", "thriller", "horror", "comedy", "historical fiction",
    "children's", "magical realism", "cozy mystery", "adventure",
]
SLOTS["email"] = [
    ("my landlord", "asking him to fix a broken heater"),
    ("my professor", "asking for a one-week extension on a term paper"),
    ("my team", "announcing that our project deadline has moved by two weeks"),
    ("a client", "apologizing for a late delivery"),
    ("a recruiter", "politely declining a job offer"),
    ("my neighbor", "about their dog barking late at night"),
    ("a hotel", "requesting an early check-in"),
    ("my manager", "requesting next Friday off"),
    ("a supplier", "asking for a discount on a bulk order"),
    ("a conference organizer", "proposing a talk about open-source tools"),
    ("my gym", "canceling my membership"),
    ("a former colleague", "asking for a reference letter"),
    ("the parents of my students", "about an upcoming field trip to a science museum"),
    ("a customer", "whose order was shipped to the wrong address"),
    ("the homeowners' association", "complaining about a broken parking gate"),
    ("a vendor", "following up on an unpaid invoice"),
    ("my book club", "suggesting a book for next month"),
    ("a new hire", "welcoming her to the team"),
    ("an interviewer", "thanking him after a job interview"),
    ("the city council office", "asking how to get a street parking permit"),
    ("a contractor", "asking for a revised quote for a kitchen renovation"),
    ("my child's teacher", "asking for a meeting about homework load"),
    ("a coworker", "asking him to stop scheduling meetings during lunch"),
    ("a local newspaper", "pitching a story about a community garden"),
    ("my insurance company", "disputing a denied claim"),
    ("the organizers of a charity run", "volunteering to help at the water station"),
]
SLOTS["email_tone"] = ["polite", "formal", "friendly", "brief", "firm but polite", "warm", "professional"]
SLOTS["job"] = [
    "junior data analyst", "barista", "middle school science teacher", "graphic designer",
    "nurse practitioner", "software engineer", "project manager", "museum educator",
    "customer support specialist", "marketing coordinator", "veterinary assistant",
    "civil engineer", "paralegal", "sous chef", "UX researcher", "warehouse supervisor",
    "social media manager", "lab technician", "bank teller", "physical therapist",
]
SLOTS["experience"] = [
    "three years of retail experience", "just graduated with a biology degree",
    "spent five years in the army before going back to school", "am switching careers from accounting",
    "have run my own small business for four years", "have volunteered at a food bank every weekend",
    "worked part-time while finishing my degree", "led a team of six at my last job",
    "took two years off to care for a family member", "have mostly worked as a freelancer",
]
SLOTS["speech"] = [
    "a retirement party for a coworker who worked here for 30 years",
    "the graduation of a small rural high school", "my parents' 35th anniversary dinner",
    "the opening of a community garden", "a farewell lunch for an intern",
    "the launch of a neighborhood recycling program", "an award ceremony for volunteer firefighters",
    "the first day of a coding bootcamp", "my best friend's 40th birthday",
    "the dedication of a new public library branch", "a team that just finished a hard project",
    "a youth soccer team's end-of-season party",
]
SLOTS["product"] = [
    "a bamboo cutting board", "noise-cancelling headphones for kids", "a reusable silicone food bag",
    "a smart plant-watering sensor", "a handmade ceramic mug", "a waterproof hiking jacket",
    "a standing desk converter", "an ergonomic office chair", "a compact espresso machine",
    "a weighted blanket", "a foldable electric scooter", "a cast-iron skillet",
    "a sunrise alarm clock", "a dog harness with a built-in light", "an insulated water bottle",
    "a language-learning board game", "a portable phone projector", "a set of beeswax food wraps",
]
SLOTS["platform"] = [
    "LinkedIn post", "Instagram caption", "short newsletter blurb", "Facebook community group post",
    "press release", "flyer", "short radio announcement",
]
SLOTS["announcement"] = [
    "that our bakery now opens on Sundays", "the launch of my freelance design business",
    "a charity 5K next month", "a new hiking club at our office", "our summer reading challenge",
    "a free repair café at the community center", "our café's new plant-based menu",
    "a pottery class for beginners", "the reopening of a renovated public pool",
    "a job opening for a part-time bookkeeper", "a neighborhood clean-up day",
    "a fundraiser for the local animal rescue", "our startup's first product release",
]
SLOTS["plain_sentence"] = [
    "We need the report by Friday or there will be problems.",
    "The meeting was long and nothing got decided.",
    "Your package is late because of the weather.",
    "I can't come to the party.",
    "The new software is hard to use and people don't like it.",
    "Please stop leaving dirty dishes in the sink.",
    "Our sales went down this quarter.",
    "Thanks for the help yesterday, it was good.",
    "The restaurant was okay but the service was slow.",
    "We are changing the schedule again next week.",
    "I think your idea could maybe work if we try it.",
    "The train was delayed so I missed the start of the presentation.",
    "This product is cheap and it does what it says.",
    "You forgot to attach the file.",
    "The park will be closed for repairs until spring.",
    "Our team won the game because everyone worked hard.",
    "I don't agree with the decision but I will follow it.",
    "The price of the tickets is going up next month.",
]
SLOTS["style"] = [
    "formal", "friendly", "concise", "persuasive", "professional", "enthusiastic", "diplomatic",
    "humorous", "like a news headline",
]
SLOTS["blog_topic"] = [
    "how to start composting in a small apartment", "the hidden costs of owning a pet",
    "why sleep matters for productivity", "budget travel in Southeast Asia",
    "a beginner's guide to sourdough baking", "minimalism for busy families",
    "learning a second language after 40", "setting up good lighting in a home office",
    "how to prepare for your first triathlon", "what I learned from a year without social media",
    "the basics of birdwatching", "how to plan a zero-waste picnic",
    "choosing your first acoustic guitar", "making friends in a new city",
    "growing herbs on a windowsill", "why everyone should learn basic first aid",
    "the joy of slow travel by train", "how small businesses can use email newsletters",
]
SLOTS["business"] = [
    "a dog-walking service", "a vegan food truck", "a board game café", "a bicycle repair shop",
    "a math tutoring company", "a podcast about personal finance", "a plant nursery",
    "an app that helps people split bills", "a mobile car-wash business", "a bakery specializing in bagels",
    "a yoga studio for seniors", "a wedding photography business", "a coworking space for parents",
    "a used-bookshop café", "a meal-prep delivery service", "a kayak rental company",
]
SLOTS["letter_pair"] = [
    ("a soldier in 1918", "his younger brother"), ("a time traveler", "her younger self"),
    ("a small coastal town's mayor", "the townspeople"), ("a retiring astronaut", "children who want to fly to space"),
    ("a tree that has stood for 300 years", "the family who just bought the land"),
    ("a pioneer crossing the Oregon Trail", "her sister back in Ohio"),
    ("an old family dog", "the new puppy"), ("a grandfather", "his grandson on his first day of college"),
    ("an Arctic explorer", "his wife at home"), ("a student studying abroad in Japan", "her parents"),
    ("a robot in a factory", "the engineer who built it"), ("a mountain", "the climbers who visit it"),
]
SLOTS["kid_topic"] = [
    "a hedgehog who is scared of thunder", "a little cloud that wants to rain on a desert",
    "a toy train that runs away to see the sea", "a girl who collects sounds in jars",
    "a sleepy owl who can't stay awake at night", "a turtle who wants to win a race fairly",
    "a bear who opens a honey shop", "a boy who plants a tree on the moon",
    "a lost mitten that finds its way home", "a penguin who dreams of flying",
    "a friendly monster who lives under the stairs", "a snail who goes on a very long trip",
    "twin foxes who learn to share", "a bus that tells jokes to its passengers",
]
SLOTS["essay_claim"] = [
    "schools should teach personal finance", "cities should build more protected bike lanes",
    "homework should be limited in elementary school", "public libraries deserve more funding",
    "a four-day work week benefits companies", "museums should be free to enter",
    "cities should plant more trees instead of building parking lots",
    "every student should learn a musical instrument", "people should repair things instead of replacing them",
    "voting should be mandatory", "zoos play an important role in conservation",
    "remote work is good for small towns", "plastic bags should be banned everywhere",
    "high school should start later in the morning", "fast fashion should be taxed",
]
SLOTS["limerick_topic"] = [
    "a cat who thinks it owns the house", "a chef who keeps burning the toast",
    "a dentist who is afraid of teeth", "a cow that wants to be a ballerina",
    "a wizard whose spells always go wrong", "a forgetful goldfish", "a parrot that only speaks French",
    "a snowman in July", "a penguin on vacation in Spain", "an accountant who loves to dance",
    "a squirrel that hoards bottle caps", "a pirate with seasickness", "a tired alarm clock",
    "a sock that lost its pair",
]
SLOTS["note_for"] = [
    "a friend starting chemotherapy", "my daughter before her first big exam",
    "a colleague who just got laid off", "my team after a tough quarter",
    "a neighbor who just moved in", "my brother who is training for his first triathlon",
    "a student who failed a test", "my mom on her first day of retirement",
    "a friend who is nervous about moving abroad", "nurses at our local hospital",
]
SLOTS["summary_audience"] = [
    "a busy executive", "a ten-year-old", "a newspaper reader", "someone skimming on a phone",
    "a colleague who missed the meeting",
]

# ----------------------------------------------------------------------------------- roleplay
SLOTS["persona"] = [
    "a pirate captain", "a Victorian butler", "a mission controller during a rocket launch",
    "a stand-up comedian", "a wise old wizard", "a 1920s newspaper reporter",
    "a barista who knows every regular customer", "a park ranger in Yellowstone",
    "an over-excited sports commentator", "a Shakespearean actor", "a medieval court jester",
    "a friendly robot from the future", "a strict ballet instructor", "a cheerful kindergarten teacher",
    "a sarcastic teenager", "the onboard computer of a long-haul spaceship", "a Roman centurion",
    "a celebrity chef on a cooking show", "an overly enthusiastic real estate agent",
    "a mountain guide on Kilimanjaro", "a game show host", "a time traveler from the year 3000",
    "a fortune teller at a county fair", "a submarine captain", "a night guard at a natural history museum",
    "a cowboy on a cattle drive in 1870", "a grumpy old fisherman", "a royal astronomer in ancient Babylon",
    "a nervous first-time tour guide", "a gossiping hairdresser in a small town",
    "a retired rock star", "a polite but very tired dragon", "a Viking explorer",
    "a 1960s flight attendant", "a zen monk", "a conspiracy-minded taxi driver",
]
SLOTS["rp_ask"] = [
    "Introduce yourself and describe your typical day.",
    "Tell me about the most memorable moment of your career.",
    "Give me advice on dealing with a difficult boss.",
    "Explain how to make a proper cup of tea.",
    "Describe the weather today.",
    "React to the news that the internet has gone down worldwide.",
    "Convince me to join your crew.",
    "Tell me what you think of smartphones.",
    "Give me directions to the nearest bakery.",
    "Tell me a story about the strangest customer you ever met.",
    "Explain why I should never give up.",
    "Describe your favorite meal.",
]
SLOTS["negotiation"] = [
    ("a used-car dealer", "a buyer looking at a 2016 sedan listed at $11,500", "I offer $9,000 cash."),
    ("a landlord", "a tenant who wants to renew the lease without a rent increase", "I'll sign for two years if the rent stays the same."),
    ("a hiring manager", "a candidate who wants a higher starting salary", "I was hoping for $8,000 more than your offer."),
    ("a vendor at a flea market", "a customer interested in a vintage brass lamp priced at $120", "I'll give you $60 for it."),
    ("a coffee bean supplier", "a café owner asking for a better price per kilo", "Another roaster offered me 15% less."),
    ("a freelance web designer", "a startup founder with a small budget", "We can only pay half your usual rate, but we can offer equity."),
    ("a wedding caterer", "a couple whose guest list just grew by 40 people", "Can you keep the price per head the same?"),
    ("a software vendor", "an IT manager renewing a license for 200 seats", "We'd renew for three years at a 25% discount."),
    ("a teenager's parent", "a teenager negotiating a later curfew", "If I get home by midnight I'll text you every hour."),
    ("a gift shop owner", "a local potter who wants her mugs displayed at the front", "I'll run a free workshop in your shop if you display them."),
    ("a contractor", "a homeowner who thinks the roof repair quote is too high", "Your competitor quoted $2,000 less."),
    ("a gallery owner", "an artist negotiating commission on sales", "I'd like the commission cut from 50% to 35%."),
    ("a travel agent", "a customer wanting a refund on a non-refundable tour", "Could I at least get a voucher for next year?"),
    ("a farmer selling hay", "a stable owner who needs 300 bales", "I'll buy all 300 if you deliver for free."),
]
SLOTS["complaint"] = [
    ("a bank's customer service agent", "there's a card payment I don't recognize", "the unknown payment"),
    ("a train company's agent", "my train was canceled and I missed a connection", "the missed connection"),
    ("an online store's support agent", "I received the wrong size of shoes", "the wrong shoes"),
    ("a hotel receptionist", "my room smells of smoke", "the smoky room"),
    ("a phone company's agent", "I was charged twice this month", "the double charge"),
    ("a restaurant manager", "my food arrived cold", "the cold food"),
    ("an electricity company's agent", "my bill is three times higher than usual", "the huge bill"),
    ("a car rental agent", "the car I reserved isn't available", "the missing rental car"),
    ("a gym's front desk worker", "the showers have been broken for a week", "the broken showers"),
    ("a furniture store's delivery coordinator", "my sofa delivery was missed twice", "the missed sofa delivery"),
]
SLOTS["figure"] = [
    "Leonardo da Vinci", "Cleopatra", "Isaac Newton", "Ada Lovelace", "Nikola Tesla",
    "Abraham Lincoln", "Frida Kahlo", "Galileo Galilei", "Jane Austen", "Charles Darwin",
    "Wolfgang Amadeus Mozart", "Queen Elizabeth I", "Benjamin Franklin", "Amelia Earhart",
    "Harriet Tubman", "Ibn Battuta", "Hypatia of Alexandria", "Sitting Bull", "Florence Nightingale",
    "Albert Einstein",
]
SLOTS["figure_q"] = [
    "What do you think of modern smartphones?", "Describe the greatest challenge you faced.",
    "What advice would you give a young person today?", "How would you react to seeing a modern city?",
    "What are you most proud of?", "What did people misunderstand about you?",
    "Tell me about an ordinary day in your life.", "What would you change about your era if you could?",
]
SLOTS["coach"] = [
    ("Spanish tutor", "have a simple conversation with me about my weekend, correcting my mistakes"),
    ("career coach", "help me prepare for a conversation about a promotion"),
    ("meditation guide", "lead me through a five-minute breathing exercise"),
    ("debate partner", "argue against my view that cities should ban cars from downtown"),
    ("dungeon master", "start a fantasy adventure for a party of three"),
    ("writing mentor", "critique the first line of my novel: 'The rain had opinions that night.'"),
    ("French tutor", "quiz me on common restaurant phrases"),
    ("public speaking coach", "help me rehearse a two-minute toast"),
    ("study buddy", "quiz me on the periodic table's first twenty elements"),
    ("startup investor", "grill me about my idea for a dog-sitting app"),
    ("improv partner", "start a scene set in a hot-air balloon"),
    ("Japanese tutor", "teach me how to introduce myself politely"),
]
SLOTS["adventure"] = [
    ("a young thief", "in a sprawling desert bazaar"), ("a marine biologist", "in a sunken research station"),
    ("an astronaut", "on an abandoned space station"), ("a knight", "at the gates of a haunted castle"),
    ("a detective", "in a fog-covered Victorian London"), ("a botanist", "in an unexplored jungle valley"),
    ("a courier", "in a cyberpunk megacity"), ("a wizard's apprentice", "in a library where books whisper"),
    ("an archaeologist", "inside a newly discovered pyramid"), ("a stowaway", "aboard a zeppelin"),
]
SLOTS["pro_client"] = [
    ("a veterinarian", "my cat has stopped eating since yesterday"),
    ("a financial advisor", "I just inherited $20,000 and don't know what to do with it"),
    ("a wedding planner", "we have four months and a small budget"),
    ("an interior designer", "my living room feels dark and cramped"),
    ("a travel agent", "I want a quiet beach vacation but hate flying long distances"),
    ("a real estate agent", "I'm a first-time buyer with a modest budget"),
    ("a pharmacist", "I want to know whether I can take ibuprofen with my allergy pills"),
    ("a librarian", "I need sources for a school project on volcanoes"),
    ("a mechanic", "my car makes a squealing noise when I brake"),
    ("an IT help desk technician", "my laptop is extremely slow since the last update"),
    ("a gardener", "my tomato plants have brown spots on their leaves"),
    ("a tailor", "I need a suit altered for a job interview in three days"),
]
SLOTS["explainer_style"] = [
    "a pirate", "a sports commentator", "a noir detective", "a nature documentary narrator",
    "a Shakespearean actor", "a surfer", "a medieval herald", "a cheerful flight attendant",
]
SLOTS["simple_topic"] = [
    "how compound interest works", "how to do laundry", "why we need sleep", "how a bill becomes law",
    "how to change a flat tire", "how the stock market works", "why the sky is blue",
    "how to brew coffee", "how recycling works", "how to make a budget",
]
SLOTS["interview_job"] = [
    "product manager", "data scientist", "elementary school teacher", "retail store manager",
    "front-end developer", "hospital administrator", "journalist", "sales representative",
    "flight attendant", "accountant",
]

# ----------------------------------------------------------------------------------- coding
SLOTS["lang"] = [
    "Python", "JavaScript", "TypeScript", "Java", "C++", "C#", "Go", "Rust", "Ruby", "Kotlin",
    "Swift", "PHP",
]
SLOTS["lang_target"] = [x for x in SLOTS["lang"] if x != "Python"]
SLOTS["code_task"] = [
    "reverses the order of words in a sentence", "checks whether an integer is a palindrome",
    "merges two sorted lists into one sorted list", "removes duplicates from a list while preserving order",
    "converts a Roman numeral to an integer", "flattens an arbitrarily nested list",
    "computes a moving average over a window of size k", "validates a password (at least 8 characters, one digit, one uppercase letter)",
    "finds the longest common prefix of a list of strings", "counts the vowels in a string",
    "rotates a square matrix 90 degrees clockwise", "computes the Levenshtein distance between two strings",
    "groups a list of words into anagram groups", "checks whether brackets in a string are balanced",
    "converts snake_case identifiers to camelCase", "returns the k largest elements of an array",
    "implements run-length encoding and decoding", "checks whether a binary tree is height-balanced",
    "performs a breadth-first search on a graph given as an adjacency list", "detects a cycle in a singly linked list",
    "computes the power set of a list", "generates all permutations of a string",
    "implements a stack with push, pop and peek", "formats a number with thousands separators",
    "splits a list into chunks of size n", "finds the first non-repeating character in a string",
    "converts a decimal integer to binary without using built-in conversion", "merges overlapping intervals",
    "computes the dot product of two vectors", "sorts a list of records by a given key",
    "finds all pairs in an array that sum to a target value", "implements quicksort",
    "implements merge sort", "implements Dijkstra's shortest-path algorithm",
    "capitalizes the first letter of every word", "checks whether two strings are anagrams",
    "implements a trie with insert and search", "returns the transpose of a matrix",
    "counts the islands in a 2D grid of 0s and 1s", "computes the greatest common divisor recursively",
    "parses a query string like 'a=1&b=2' into a dictionary", "checks whether a year is a leap year",
    "finds the missing number in an array containing 1..n with one gap", "computes the maximum subarray sum",
    "implements a simple token-bucket rate limiter", "returns the longest palindromic substring",
]
SLOTS["code_concept"] = [
    "closures", "recursion", "generics", "async/await", "dependency injection", "immutability",
    "pattern matching", "interfaces", "memoization", "error handling with exceptions", "iterators",
    "higher-order functions", "polymorphism", "operator overloading", "lambda functions",
    "variable scope", "unit testing with mocks", "enums", "string formatting", "type inference",
    "reading and writing files", "null safety", "modules and imports", "inheritance versus composition",
]
SLOTS["tech_pair"] = [
    ("Python lists", "tuples"), ("SQL databases", "document databases"), ("TCP", "UDP"),
    ("git merge", "git rebase"), ("React", "Vue"), ("stack memory", "heap memory"),
    ("arrays", "linked lists"), ("Docker containers", "virtual machines"),
    ("compiled languages", "interpreted languages"), ("==", "=== in JavaScript"),
    ("abstract classes", "interfaces in Java"), ("breadth-first search", "depth-first search"),
    ("REST", "GraphQL"), ("HTTP", "HTTPS"), ("unit tests", "integration tests"),
    ("a hash map", "a balanced binary search tree"), ("static typing", "dynamic typing"),
    ("cookies", "local storage in the browser"), ("monoliths", "microservices"),
    ("let", "var in JavaScript"), ("a list comprehension", "a for loop in Python"),
    ("shallow copies", "deep copies"), ("SQL inner joins", "left joins"),
]
SLOTS["bug"] = [
    ("Python", "def average(nums):\n    total = 0\n    for n in nums:\n        total += n\n    return total / len(nums) + 1"),
    ("Python", "def append_item(item, items=[]):\n    items.append(item)\n    return items"),
    ("Python", "def is_even(n):\n    if n % 2 == 1:\n        return True\n    return False"),
    ("Python", "for i in range(1, len(names)):\n    print(names[i])"),
    ("Python", "def find(d, key):\n    if d[key]:\n        return d[key]\n    return None"),
    ("JavaScript", "for (var i = 0; i < 3; i++) {\n  setTimeout(() => console.log(i), 100);\n}"),
    ("JavaScript", "function isAdult(age) {\n  if (age = 18) return true;\n  return age > 18;\n}"),
    ("JavaScript", "const nums = [10, 1, 3];\nnums.sort();\nconsole.log(nums[0]); // expect 1"),
    ("Java", "String a = \"hi\";\nString b = new String(\"hi\");\nif (a == b) System.out.println(\"same\");"),
    ("C", "int *make_array(void) {\n  int arr[10];\n  return arr;\n}"),
    ("C++", "std::vector<int> v = {1, 2, 3};\nfor (int i = 0; i <= v.size(); i++) std::cout << v[i];"),
    ("Go", "for _, v := range items {\n    go func() { fmt.Println(v) }()\n}"),
    ("SQL", "SELECT name, COUNT(*) FROM orders WHERE COUNT(*) > 5 GROUP BY name;"),
    ("Python", "with open('data.txt') as f:\n    lines = f.readlines()\nfor line in lines:\n    if line == 'END':\n        break"),
    ("Rust", "let s = String::from(\"hello\");\nlet t = s;\nprintln!(\"{}\", s);"),
]
SLOTS["snippet"] = [
    ("Python", "print(sorted(set(w.lower() for w in text.split()), key=len)[-3:])"),
    ("Python", "result = {k: v for k, v in zip(keys, values) if v is not None}"),
    ("JavaScript", "const total = cart.reduce((acc, item) => acc + item.price * item.qty, 0);"),
    ("Python", "from collections import Counter\nprint(Counter(s).most_common(1)[0][0])"),
    ("Bash", "find . -name '*.log' -mtime +7 -delete"),
    ("SQL", "SELECT department, AVG(salary) FROM employees GROUP BY department HAVING AVG(salary) > 50000;"),
    ("JavaScript", "const unique = [...new Set(arr)];"),
    ("Python", "matrix = [[row[i] for row in grid] for i in range(len(grid[0]))]"),
    ("Haskell", "quicksort [] = []\nquicksort (p:xs) = quicksort [x | x <- xs, x < p] ++ [p] ++ quicksort [x | x <- xs, x >= p]"),
    ("Python", "import functools\n@functools.lru_cache(maxsize=None)\ndef ways(n):\n    return 1 if n <= 1 else ways(n - 1) + ways(n - 2)"),
    ("C", "while (*dst++ = *src++);"),
    ("Bash", "du -sh * | sort -h | tail -5"),
]
SLOTS["sql_task"] = [
    "lists all employees hired after 1 January 2020, newest first",
    "counts how many products are in each category",
    "finds employees who earn more than their manager",
    "returns the second highest salary in the employees table",
    "finds products that have never been ordered",
    "computes the monthly revenue for the last 12 months",
    "deletes duplicate rows from a contacts table, keeping the lowest id",
    "lists the departments with more than ten employees",
    "finds the average rating of each movie with at least 50 reviews",
    "returns each student's highest exam score",
]
SLOTS["git_task"] = [
    "undo my last commit but keep the changes", "rename a branch", "delete a remote branch",
    "see who changed a specific line in a file", "move uncommitted changes to a new branch",
    "squash my last three commits", "discard local changes to one file",
    "find which commit introduced a bug", "change the message of my last commit",
    "pull a single commit from another branch",
]
SLOTS["shell_task"] = [
    "find all files larger than 100 MB in my home directory", "replace 'foo' with 'bar' in every .txt file in a folder",
    "show which process is using port 8080", "count unique IP addresses in an access log",
    "rename all .jpeg files in a folder to .jpg", "archive a folder into a compressed tarball",
    "show the ten most recently modified files", "watch a log file as new lines are added",
    "download a file and check its SHA-256 checksum", "list environment variables that contain PATH",
]
SLOTS["regex_target"] = [
    "US ZIP codes (five digits, optionally followed by a dash and four digits)",
    "dates in the format YYYY-MM-DD", "hexadecimal color codes like #1a2b3c or #fff",
    "words that start and end with the same letter", "time in 24-hour format such as 23:59",
    "strings that contain at least one digit and one letter", "Markdown links like [text](url)",
    "lines that end with a trailing space", "semantic version numbers like 1.4.2",
    "a UK postcode",
]
SLOTS["algo"] = [
    "binary search", "bubble sort", "heap sort", "inserting into a balanced binary search tree",
    "looking up a key in a hash table", "building a heap from an unsorted array",
    "the naive recursive algorithm for the n-th Catalan number", "Floyd-Warshall",
    "topological sort with Kahn's algorithm", "matrix multiplication done the schoolbook way",
    "checking every pair of elements in a list", "union-find with path compression",
]
SLOTS["py_to_convert"] = [
    "def squares(n):\n    return [i * i for i in range(n) if i % 2 == 0]",
    "def count_words(text):\n    counts = {}\n    for w in text.split():\n        counts[w] = counts.get(w, 0) + 1\n    return counts",
    "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))",
    "def initials(name):\n    return ''.join(part[0].upper() for part in name.split())",
    "def safe_div(a, b):\n    try:\n        return a / b\n    except ZeroDivisionError:\n        return None",
    "class Counter:\n    def __init__(self):\n        self.n = 0\n    def inc(self):\n        self.n += 1\n        return self.n",
]

# ------------------------------------------------------------------------------------- stem
SLOTS["stem_concept"] = [
    "photosynthesis", "cellular respiration", "plate tectonics", "natural selection",
    "the Doppler effect", "Ohm's law", "Newton's third law of motion", "osmosis", "the greenhouse effect",
    "radioactive half-life", "why nothing can travel faster than light", "quantum tunneling",
    "superconductivity", "how catalysts speed up reactions", "how enzymes work", "action potentials in neurons",
    "antibiotic resistance", "the difference between mitosis and meiosis", "how the periodic table is organized",
    "covalent versus ionic bonds", "buoyancy", "ocean tides", "the Big Bang theory", "dark matter",
    "how astronomers detect exoplanets", "how rainbows form", "how transistors work", "gradient descent",
    "Bayes' theorem", "how the heart pumps blood", "the placebo effect", "how hearing works",
    "the difference between weather and climate", "the speed of sound", "how a refrigerator cools food",
    "how airplanes generate lift", "how a microwave oven heats food", "why leaves change color in autumn",
    "how earthquakes are measured", "the structure of an atom", "what a p-value means",
    "how solar panels generate electricity", "the role of the liver", "how muscles contract",
    "what stem cells are", "the difference between viruses and bacteria", "how desalination plants make fresh water",
    "how carbon dating works", "what makes a material magnetic", "how the kidneys filter blood",
    "how noise-cancelling headphones work", "what a neural network is", "how a nuclear power plant makes steam",
    "how coral reefs form", "the Coriolis effect", "what pH measures",
]
SLOTS["audience"] = [
    "a ten-year-old", "a high school student", "a first-year university student", "my grandmother",
    "someone with no science background", "a curious middle schooler", "an art student",
]
SLOTS["stem_pair"] = [
    ("speed", "velocity"), ("mass", "weight"), ("heat", "temperature"), ("an atom", "a molecule"),
    ("a virus", "a bacterium"), ("AC", "DC electricity"), ("a comet", "an asteroid"),
    ("an element", "a compound"), ("accuracy", "precision"), ("correlation", "causation"),
    ("a genotype", "a phenotype"), ("kinetic energy", "potential energy"), ("a star", "a planet"),
    ("an acid", "a base"), ("weathering", "erosion"), ("RAM", "storage"),
    ("endothermic", "exothermic reactions"), ("a hypothesis", "a theory"), ("a series circuit", "a parallel circuit"),
    ("arteries", "veins"),
]
SLOTS["why_q"] = [
    "is the sky blue during the day but red at sunset", "do we have leap years",
    "does salt melt snow on roads", "do cats purr", "does bread rise", "do onions make us cry",
    "does metal feel colder than wood at the same temperature", "do we get goosebumps",
    "is the ocean salty", "does a spoon look bent in a glass of water", "do planets orbit in ellipses",
    "do we yawn", "does popcorn pop", "do our fingers wrinkle in water", "does the Moon always show the same face to Earth",
    "do some materials conduct electricity better than others", "does hot air rise",
    "do astronauts float on the space station", "does soap remove grease", "do bubbles form in boiling water",
]
SLOTS["organelle"] = [
    "the mitochondria", "the ribosome", "the Golgi apparatus", "the endoplasmic reticulum",
    "the cell membrane", "the nucleus", "chloroplasts", "lysosomes", "the cytoskeleton", "vacuoles",
]
SLOTS["compound"] = [
    ("water", "H2O"), ("table salt", "NaCl"), ("carbon dioxide", "CO2"), ("glucose", "C6H12O6"),
    ("calcium carbonate", "CaCO3"), ("sulfuric acid", "H2SO4"), ("ammonia", "NH3"),
    ("methane", "CH4"), ("ethanol", "C2H5OH"), ("baking soda", "NaHCO3"),
]
SLOTS["grams"] = [str(g) for g in (5, 9, 10, 12, 18, 25, 36, 40, 50, 64, 75, 100, 120, 150, 250)]
SLOTS["equation"] = [
    "H2 + O2 -> H2O", "Fe + O2 -> Fe2O3", "C3H8 + O2 -> CO2 + H2O", "Al + HCl -> AlCl3 + H2",
    "N2 + H2 -> NH3", "CH4 + O2 -> CO2 + H2O", "KClO3 -> KCl + O2", "Na + Cl2 -> NaCl",
    "C6H12O6 + O2 -> CO2 + H2O", "Zn + HCl -> ZnCl2 + H2",
]
SLOTS["science_history"] = [
    "the discovery of penicillin", "the Michelson-Morley experiment", "Mendel's pea plant experiments",
    "the first measurement of the speed of light", "the discovery of the structure of the atom by Rutherford",
    "the invention of the transistor", "the development of the polio vaccine by Jonas Salk",
    "Eratosthenes' measurement of Earth's circumference", "the discovery of the cosmic microwave background",
    "the first human genome sequencing", "Pasteur's swan-neck flask experiment", "the invention of the telescope",
]

# ------------------------------------------------------------------------------- humanities
SLOTS["event"] = [
    "the fall of the Berlin Wall", "the American Civil War", "the Meiji Restoration",
    "the Protestant Reformation", "the Cuban Missile Crisis", "the Industrial Revolution in Britain",
    "the partition of India", "the Black Death", "the space race", "the collapse of the Soviet Union",
    "the Spanish conquest of the Aztec Empire", "the Hundred Years' War", "the Glorious Revolution",
    "World War I", "the Great Depression", "the Haitian Revolution", "the unification of Germany",
    "the Opium Wars", "the decolonization of Africa", "the civil rights movement in the United States",
    "the fall of Constantinople in 1453", "the Russian Revolution of 1917", "the American Revolution",
    "the Mongol conquests", "the Crusades", "the Thirty Years' War", "the end of apartheid in South Africa",
    "the Mexican Revolution", "the Taiping Rebellion", "the Irish Famine", "the Dust Bowl",
    "the independence of Latin American countries in the early 1800s", "the Cold War arms race",
]
SLOTS["book"] = [
    ("Pride and Prejudice", "Jane Austen"), ("1984", "George Orwell"), ("To Kill a Mockingbird", "Harper Lee"),
    ("Moby-Dick", "Herman Melville"), ("Crime and Punishment", "Fyodor Dostoevsky"),
    ("One Hundred Years of Solitude", "Gabriel García Márquez"), ("Things Fall Apart", "Chinua Achebe"),
    ("The Odyssey", "Homer"), ("Hamlet", "William Shakespeare"), ("Macbeth", "William Shakespeare"),
    ("Don Quixote", "Miguel de Cervantes"), ("Jane Eyre", "Charlotte Brontë"), ("Beloved", "Toni Morrison"),
    ("The Catcher in the Rye", "J. D. Salinger"), ("Brave New World", "Aldous Huxley"),
    ("War and Peace", "Leo Tolstoy"), ("The Metamorphosis", "Franz Kafka"), ("Wuthering Heights", "Emily Brontë"),
    ("Lord of the Flies", "William Golding"), ("The Handmaid's Tale", "Margaret Atwood"),
    ("Anna Karenina", "Leo Tolstoy"), ("Les Misérables", "Victor Hugo"), ("The Little Prince", "Antoine de Saint-Exupéry"),
    ("Invisible Man", "Ralph Ellison"), ("The Tale of Genji", "Murasaki Shikibu"), ("Madame Bovary", "Gustave Flaubert"),
    ("The Old Man and the Sea", "Ernest Hemingway"), ("Of Mice and Men", "John Steinbeck"),
]
SLOTS["lit_aspect"] = [
    "the role of the setting", "the narrator's reliability", "the main conflict", "the ending",
    "the use of symbolism", "how the protagonist changes", "the portrayal of social class",
    "the theme of isolation",
]
SLOTS["philosophy"] = [
    ("Plato", "the allegory of the cave"), ("Descartes", "'I think, therefore I am'"),
    ("Nietzsche", "the will to power"), ("Sartre", "'existence precedes essence'"),
    ("Hobbes", "the state of nature"), ("Locke", "natural rights"), ("Rousseau", "the social contract"),
    ("Simone de Beauvoir", "'one is not born, but rather becomes, a woman'"),
    ("Hume", "the problem of induction"), ("Epicurus", "pleasure and tranquility"),
    ("Epictetus", "the dichotomy of control"), ("Laozi", "wu wei"), ("Wittgenstein", "language games"),
    ("Hannah Arendt", "the banality of evil"), ("John Rawls", "the veil of ignorance"),
    ("Socrates", "'the unexamined life is not worth living'"), ("Thomas Aquinas", "natural law"),
    ("Machiavelli", "whether it is better to be feared than loved"), ("Spinoza", "God as nature"),
    ("Camus", "the absurd"), ("Mencius", "the innate goodness of human nature"),
]
SLOTS["econ"] = [
    "supply and demand", "comparative advantage", "price elasticity of demand", "externalities",
    "moral hazard", "diminishing marginal returns", "gross domestic product", "the tragedy of the commons",
    "the prisoner's dilemma", "tariffs", "monopolies", "the sunk cost fallacy", "behavioral nudges",
    "the gig economy", "minimum wage laws", "economies of scale", "public goods", "asymmetric information",
    "the business cycle", "exchange rates",
]
SLOTS["art_movement"] = [
    "Impressionism", "Cubism", "Baroque art", "Surrealism", "Romanticism in painting", "the Bauhaus",
    "Art Nouveau", "Abstract Expressionism", "Pop Art", "Gothic architecture", "minimalism in music",
    "Dada", "the Pre-Raphaelites", "Ukiyo-e woodblock prints", "Brutalist architecture", "Futurism",
]
SLOTS["river_civ"] = [
    ("the Nile", "ancient Egypt"), ("the Tigris and Euphrates", "Mesopotamia"),
    ("the Indus", "the Indus Valley civilization"), ("the Yellow River", "early Chinese dynasties"),
    ("the Ganges", "ancient Indian kingdoms"), ("the Mississippi", "the Mississippian culture"),
    ("the Danube", "the Roman frontier"), ("the Thames", "London"),
]
SLOTS["debate"] = [
    "social media has harmed democratic debate", "history should be taught by themes rather than chronologically",
    "museums should return artifacts to their countries of origin", "statues of controversial figures should be removed",
    "translation always loses something essential", "great art requires suffering",
    "tourism does more harm than good to historic cities", "the internet has made people less curious",
    "national languages should be protected by law", "literature classes should include video games",
    "democracy requires an educated population", "technology has made us lonelier",
]
SLOTS["compare_h"] = [
    ("Athens", "Sparta"), ("Stoicism", "Epicureanism"), ("Baroque music", "Classical-period music"),
    ("the Aztec Empire", "the Inca Empire"), ("Buddhism", "Hinduism"), ("Romanticism", "the Enlightenment"),
    ("the British and French colonial empires", "each other"), ("realism", "idealism in international relations"),
    ("Keynesian economics", "monetarism"), ("the Ottoman Empire", "the Mughal Empire"),
    ("Shakespeare's comedies", "his tragedies"), ("Gothic", "Romanesque architecture"),
]
SLOTS["language_q"] = [
    "Why does English spelling seem so inconsistent?", "How did Latin evolve into the Romance languages?",
    "What is the Great Vowel Shift?", "Why do some languages have grammatical gender?",
    "How do pidgins become creoles?", "Where does the word 'salary' come from?",
    "Why are there so many dialects of Arabic?", "How did Korean get its own alphabet?",
    "What is the Sapir-Whorf hypothesis, and is it supported by evidence?",
    "How did English end up with so many words borrowed from French?",
]
SLOTS["place_culture"] = [
    "Kyoto", "Marrakech", "Istanbul", "Cusco", "Varanasi", "Timbuktu", "Petra", "Angkor",
    "Samarkand", "Alexandria", "St. Petersburg", "Jerusalem",
]

# ------------------------------------------------------------------------------- everyday
SLOTS["dish"] = [
    "a simple tomato soup", "chicken curry", "homemade pizza dough", "a vegetable stir-fry", "banana bread",
    "French omelette", "chili con carne", "pad thai", "a Greek salad", "mushroom stroganoff",
    "shakshuka", "pancakes from scratch", "lentil soup", "guacamole", "fried rice", "roast chicken",
    "a lemon tart", "potato gnocchi", "beef tacos", "apple crumble", "miso soup", "hummus",
    "carbonara", "falafel", "chocolate chip cookies",
]
SLOTS["ingredients"] = [
    "eggs, spinach and feta", "leftover rice, frozen peas and soy sauce", "chickpeas, canned tomatoes and onions",
    "potatoes, cheddar and broccoli", "chicken thighs, lemons and garlic", "pasta, canned tuna and capers",
    "sweet potatoes and black beans", "tofu, ginger and scallions", "zucchini, ricotta and basil",
    "ground beef, bell peppers and rice", "oats, bananas and peanut butter", "cauliflower, curry paste and coconut milk",
]
SLOTS["substitute"] = [
    ("buttermilk", "pancakes"), ("eggs", "brownies"), ("butter", "cookies"), ("heavy cream", "pasta sauce"),
    ("baking powder", "muffins"), ("white wine", "a creamy mushroom sauce"), ("sour cream", "a dip"),
    ("cornstarch", "gravy"), ("fresh garlic", "a stir-fry"), ("brown sugar", "banana bread"),
]
SLOTS["servings"] = ["2", "4", "6", "8", "12"]
SLOTS["city"] = [
    "Kyoto", "Barcelona", "Mexico City", "Cape Town", "Reykjavik", "Prague", "Buenos Aires",
    "Vancouver", "Istanbul", "Seoul", "Edinburgh", "Hanoi", "Sydney", "Amsterdam", "New Orleans",
    "Montreal", "Vienna", "Copenhagen", "Singapore", "Rome", "Dublin", "Chicago", "Budapest",
    "Oaxaca", "Cartagena", "Tbilisi",
]
SLOTS["trip_days"] = ["two", "three", "four", "five", "seven", "ten"]
SLOTS["month"] = [
    "January", "February", "March", "May", "June", "July", "August", "September", "October",
    "November", "December",
]
SLOTS["traveler"] = [
    "with two kids under ten", "on a tight budget", "as a solo traveler", "with my elderly parents",
    "for my honeymoon", "and I use a wheelchair", "and I love museums", "and I mostly care about food",
    "and I don't drink alcohol", "and I like hiking",
]
SLOTS["finance_goal"] = [
    "pay off $15,000 of credit card debt", "build an emergency fund", "save for a house deposit",
    "start investing with $200 a month", "save for my kid's college", "budget on an irregular freelance income",
    "prepare financially for a baby", "plan for retirement in my thirties", "cut my monthly spending by 20%",
    "decide whether to pay off my student loans early",
]
SLOTS["finance_term"] = [
    "index funds", "a Roth IRA", "a credit score", "APR versus APY", "dollar-cost averaging", "bonds",
    "an ETF", "a 401(k) employer match", "a mortgage's amortization schedule", "diversification",
    "capital gains tax", "an expense ratio", "a balance transfer", "a certificate of deposit",
]
SLOTS["home_task"] = [
    "fix a leaky faucet", "unclog a bathroom sink", "hang a heavy mirror on drywall",
    "get rid of fruit flies", "clean a cast-iron pan", "remove mold from shower grout",
    "reduce condensation on my windows", "patch a small hole in a wall", "descale a kettle",
    "keep my apartment cool without air conditioning", "organize a small closet", "get rid of a musty smell in a basement",
    "clean a dishwasher filter", "reset a tripped circuit breaker", "stop a door from squeaking",
    "remove a sticker residue from glass", "wash a down jacket", "sharpen kitchen knives",
]
SLOTS["habit"] = [
    "drinking more water", "falling asleep faster", "reducing screen time", "reading more books",
    "waking up earlier", "keeping a journal", "cooking at home more often", "stretching every day",
    "spending less on takeout", "keeping my desk tidy", "learning a language on my commute",
    "taking breaks from my phone at dinner", "meditating", "walking 10,000 steps a day",
]
SLOTS["social_situation"] = [
    "My friend keeps canceling plans at the last minute.",
    "A coworker takes credit for my ideas in meetings.",
    "My upstairs neighbor plays loud music at 2 a.m.",
    "My sister borrowed money six months ago and hasn't mentioned it since.",
    "My partner and I disagree about how to spend the holidays.",
    "A friend asked me to be a reference but I don't think she's reliable.",
    "My teenage son barely talks to me anymore.",
    "My boss emails me late at night and expects quick answers.",
    "I was invited to two parties on the same evening.",
    "My in-laws keep giving unsolicited parenting advice.",
    "A close friend forgot my birthday.",
    "I accidentally scratched someone's car in a parking lot.",
]
SLOTS["gift_for"] = [
    "my dad", "a coworker I don't know well", "my 12-year-old niece", "my best friend",
    "my grandmother", "a new neighbor", "my boyfriend", "my child's teacher", "a host of a dinner party",
]
SLOTS["hobby"] = [
    "gardening", "baking", "photography", "board games", "camping", "knitting", "cycling",
    "jazz", "birdwatching", "cooking Korean food", "vintage cameras", "yoga", "fishing", "astronomy",
]
SLOTS["budget"] = ["$20", "$30", "$50", "$75", "$100", "$150"]
SLOTS["device_problem"] = [
    ("laptop", "gets very hot and the fan is loud"), ("phone", "battery drains by noon"),
    ("Wi-Fi router", "keeps disconnecting"), ("printer", "says it's offline"),
    ("smart TV", "won't connect to streaming apps"), ("Bluetooth headphones", "won't pair with my laptop"),
    ("tablet", "is stuck on the logo screen"), ("desktop computer", "takes ten minutes to boot"),
    ("washing machine", "shows an error and won't drain"), ("car's key fob", "stopped unlocking the doors"),
]
SLOTS["idiom"] = [
    "break the ice", "bite the bullet", "the whole nine yards", "spill the beans", "under the weather",
    "cost an arm and a leg", "let the cat out of the bag", "once in a blue moon", "hit the sack",
    "the elephant in the room", "a dime a dozen", "barking up the wrong tree", "cut corners",
    "go the extra mile", "pull someone's leg", "burn the midnight oil", "a blessing in disguise",
    "on the fence", "jump on the bandwagon", "play devil's advocate",
]
SLOTS["choice"] = [
    ("a French press", "a pour-over", "making one cup of coffee in the morning"),
    ("a Kindle", "paper books", "reading on long flights"), ("a gas grill", "a charcoal grill", "weekend barbecues"),
    ("renting", "buying an apartment", "someone who might move in three years"),
    ("a road bike", "a hybrid bike", "a 10 km daily commute"), ("Android", "iPhone", "a teenager's first phone"),
    ("a cat", "a dog", "someone who works long hours"), ("a gym membership", "home workouts", "a beginner"),
    ("a hotel", "a vacation rental", "a week-long family trip"), ("an air fryer", "a convection oven", "a small kitchen"),
    ("a laptop", "a tablet", "a college student taking notes"), ("the train", "flying", "a 600 km trip"),
]
SLOTS["pet_q"] = [
    ("a new kitten", "How do I litter-train it?"), ("my dog", "How do I stop him from pulling on the leash?"),
    ("a rescue greyhound", "How do I help her settle in?"), ("my parakeet", "What should I feed him?"),
    ("my goldfish", "How often should I clean the tank?"), ("a puppy", "How do I crate-train her?"),
    ("my senior cat", "She sleeps all day. Is that normal?"), ("two guinea pigs", "How big should their cage be?"),
]
SLOTS["plan_event"] = [
    "a surprise party for 20 people", "a kids' science-themed birthday party", "a weekend camping trip for beginners",
    "a potluck for my office", "a family reunion in a park", "a baby shower", "a game night for eight friends",
    "a small backyard movie night", "a book swap in my neighborhood", "a farewell dinner for a friend moving abroad",
]

# ================================================================================ templates
TEXT_TEMPLATES: list[T] = [
    # ----------------------------------------------------------------------- writing
    T("w_poem", "writing", "Write a {poem_form} about {poem_topic}.", (
        "Now rewrite the poem about {poem_topic} from a child's point of view.",
        "Give your {poem_form} a title and explain the imagery you chose for {poem_topic}.",
    ), 30),
    T("w_poem_tone", "writing", "Could you write me a {poem_tone} poem about {poem_topic}? {poem_constraint}", (
        "Make the poem about {poem_topic} more {poem_tone2} in tone, keeping the same structure.",
    ), 30),
    T("w_story", "writing", "Write a short story of about {story_length} words about {story_premise}.", (
        "Retell the story about {story_premise} in exactly five sentences.",
        "Write an alternative ending to the story about {story_premise}.",
    ), 28),
    T("w_opening", "writing", "Write the opening scene of a {genre} story about {story_premise}.", (
        "Continue the {genre} story with a twist the reader won't see coming.",
    ), 22),
    T("w_email", "writing", "Write a {email_tone} email to {email[0]} {email[1]}.", (
        "Now shorten the email to {email[0]} to three sentences while keeping it {email_tone}.",
        "Write the reply {email[0]} might send back.",
    ), 30),
    T("w_email_help", "writing", "I need to email {email[0]} {email[1]}. Can you draft something I can send today? Keep it {email_tone}.", (), 12),
    T("w_cover", "writing", "Write a cover letter for a {job} position. For context, I {experience}.", (
        "Cut the {job} cover letter down to 150 words.",
    ), 18),
    T("w_speech", "writing", "Write a short speech for {speech}.", (
        "Add a light joke near the beginning of the speech for {speech}.",
    ), 12),
    T("w_product", "writing", "Write a catchy product description for {product}, about 100 words.", (
        "Now write three short taglines for {product}.",
    ), 18),
    T("w_announce", "writing", "Write a {platform} announcing {announcement}.", (), 16),
    T("w_rewrite", "writing", "Rewrite this sentence to sound more {style}: \"{plain_sentence}\"", ("Now rewrite \"{plain_sentence}\" to sound {style2} instead.",), 20),
    T("w_blog_outline", "writing", "Create a detailed outline for a blog post about {blog_topic}.", (
        "Write the introduction paragraph for the post about {blog_topic} based on that outline.",
    ), 16),
    T("w_blog_intro", "writing", "Write an engaging 120-word introduction for a blog post on {blog_topic}.", (), 12),
    T("w_names", "writing", "Brainstorm ten name ideas for {business}, with a one-line explanation for each.", (
        "Pick your favorite name for {business} and write a slogan for it.",
    ), 14),
    T("w_letter", "writing", "Write a letter from {letter_pair[0]} to {letter_pair[1]}.", (), 12),
    T("w_bedtime", "writing", "Write a bedtime story for a five-year-old about {kid_topic}. Keep the language simple.", (
        "Turn the story about {kid_topic} into a rhyming version.",
    ), 14),
    T("w_essay", "writing", "Write a short persuasive essay arguing that {essay_claim}.", (
        "Now write a rebuttal to the argument that {essay_claim}.",
    ), 15),
    T("w_limerick", "writing", "Write a limerick about {limerick_topic}.", (), 14),
    T("w_note", "writing", "Help me write an encouraging note to {note_for}.", (), 10),
    # ----------------------------------------------------------------------- roleplay
    T("r_persona", "roleplay", "Pretend you are {persona}. {rp_ask}", (
        "Stay in character as {persona} and tell me about your biggest regret.",
        "Still speaking as {persona}, how would you celebrate a big victory?",
    ), 55),
    T("r_persona_b", "roleplay", "For the rest of this chat, talk like {persona}. First question: {figure_q}", (), 25),
    T("r_negotiate", "roleplay", "Let's role-play a negotiation. You are {negotiation[0]} and I am {negotiation[1]}. Make your opening move.", (
        "{negotiation[2]} How do you respond?",
    ), 14),
    T("r_interview", "roleplay", "Act as an interviewer for a {interview_job} role and ask me your first tough question.", (
        "As the interviewer for the {interview_job} role, give me honest feedback on this answer: 'My biggest strength is staying calm under pressure.'",
    ), 10),
    T("r_service", "roleplay", "You are {complaint[0]}. I'm contacting you because {complaint[1]}. Respond as you would on the phone.", (
        "I've already tried that, and it didn't fix {complaint[2]}. I'd like to speak to a supervisor.",
    ), 10),
    T("r_figure", "roleplay", "Imagine you are {figure}. {figure_q}", (
        "As {figure}, what do you think history got wrong about you?",
    ), 40),
    T("r_coach", "roleplay", "Act as my {coach[0]} and {coach[1]}.", (), 12),
    T("r_adventure", "roleplay", "Let's play a text adventure. You narrate, and I'm {adventure[0]} {adventure[1]}. Describe my surroundings and give me three choices.", (
        "I take the second choice. What happens next to the {adventure[0]}?",
    ), 10),
    T("r_pro", "roleplay", "You are {pro_client[0]} and I'm your client. {pro_client[1]}. What do you ask me first?", (), 12),
    T("r_explain_as", "roleplay", "Explain {simple_topic} as if you were {explainer_style}.", ("Now explain {simple_topic} again, but as {explainer_style2}.",), 45),
    # ----------------------------------------------------------------------- coding
    T("c_func", "coding", "Write a {lang} function that {code_task}.", (
        "Add unit tests for the {lang} function.",
        "Can you make the function that {code_task} more efficient, or explain why it already is?",
    ), 60),
    T("c_func_b", "coding", "How would you implement a function in {lang} that {code_task}? Please include comments.", ("Rewrite that solution in {lang2}.",), 40),
    T("c_concept", "coding", "Explain {code_concept} with a short example in {lang}.", (
        "What are common mistakes people make with {code_concept} in {lang}?",
    ), 45),
    T("c_compare", "coding", "What are the differences between {tech_pair[0]} and {tech_pair[1]}? When would you choose each?", (), 23),
    T("c_bug", "coding", "Find the bug in this {bug[0]} code and explain how to fix it:\n\n{bug[1]}", (), 15),
    T("c_explain", "coding", "What does this {snippet[0]} code do?\n\n{snippet[1]}", (), 11),
    T("c_sql", "coding", "Write a SQL query that {sql_task}. Assume reasonable table and column names and state them.", ("How would an index help the query that {sql_task}? Which column would you index?",), 10),
    T("c_git", "coding", "How do I {git_task} in git?", (), 10),
    T("c_shell", "coding", "Give me a shell command to {shell_task}.", (), 10),
    T("c_regex", "coding", "Write a regular expression that matches {regex_target}, and explain each part.", (), 10),
    T("c_complexity", "coding", "What is the time complexity of {algo}? Explain why.", (), 12),
    T("c_translate", "coding", "Translate this Python code to {lang_target}:\n\n{py_to_convert}", (), 30),
    # ----------------------------------------------------------------------- stem
    T("s_explain", "stem", "Explain {stem_concept} in simple terms.", (
        "Give a real-world example of {stem_concept}.",
        "What is a common misconception about {stem_concept}?",
    ), 50),
    T("s_audience", "stem", "How would you explain {stem_concept} to {audience}?", (), 45),
    T("s_pair", "stem", "What is the difference between {stem_pair[0]} and {stem_pair[1]}?", (
        "Give an everyday example that shows the difference between {stem_pair[0]} and {stem_pair[1]}.",
    ), 20),
    T("s_why", "stem", "Why {why_q}?", ("Suggest a simple experiment or observation that shows why {why_q}.",), 20),
    T("s_organelle", "stem", "What is the function of {organelle} in a cell?", ("What happens to a cell when {organelle} stops working properly?",), 10),
    T("s_moles", "stem", "How many moles are in {grams} grams of {compound[0]} ({compound[1]})? Show the calculation.", (), 20),
    T("s_balance", "stem", "Balance this chemical equation and explain your steps: {equation}", (), 10),
    T("s_history", "stem", "Describe {science_history} and why it mattered.", (), 12),
    # ----------------------------------------------------------------------- humanities
    T("h_event", "humanities", "What were the main causes and consequences of {event}?", (
        "How is {event} remembered differently in different countries?",
    ), 28),
    T("h_event_b", "humanities", "Give me a brief overview of {event}, suitable for a high school essay.", (), 25),
    T("h_book", "humanities", "Summarize the plot and main themes of {book[0]} by {book[1]}.", (
        "Is {book[0]} still relevant today? Why or why not?",
    ), 28),
    T("h_book_aspect", "humanities", "Discuss {lit_aspect} in {book[0]}.", (), 30),
    T("h_philo", "humanities", "Explain {philosophy[0]}'s idea of {philosophy[1]}.", (
        "What are the strongest objections to {philosophy[0]}'s view?",
    ), 21),
    T("h_econ", "humanities", "Explain {econ} with a real-world example.", (
        "How do governments usually respond to problems related to {econ}?",
    ), 20),
    T("h_art", "humanities", "What are the key characteristics of {art_movement}? Name a few representative works.", ("How did {art_movement} influence the artists who came after it?",), 16),
    T("h_river", "humanities", "What role did {river_civ[0]} play in the development of {river_civ[1]}?", (), 8),
    T("h_debate", "humanities", "Discuss the claim that {debate}. Present both sides fairly.", (), 12),
    T("h_compare", "humanities", "Compare and contrast {compare_h[0]} and {compare_h[1]}.", ("Which do you think had the greater lasting influence, {compare_h[0]} or {compare_h[1]}?",), 12),
    T("h_language", "humanities", "{language_q}", (), 10),
    T("h_place", "humanities", "Why has {place_culture} been an important cultural crossroads throughout history?", (), 12),
    # ----------------------------------------------------------------------- everyday
    T("e_recipe", "everyday", "How do I make {dish}? I'm cooking for {servings} people.", (
        "What side dish would go well with {dish}?",
    ), 45),
    T("e_ingredients", "everyday", "I have {ingredients} in the fridge. What can I make for dinner tonight?", (), 12),
    T("e_substitute", "everyday", "What can I use instead of {substitute[0]} in {substitute[1]}?", (), 10),
    T("e_trip", "everyday", "I'm visiting {city} for {trip_days} days in {month} {traveler}. What should I do?", (
        "What local dishes should I try while I'm in {city}, and where?",
        "How should I get around {city}, and what should I avoid?",
    ), 55),
    T("e_finance", "everyday", "What's a realistic plan to {finance_goal}?", (), 10),
    T("e_term", "everyday", "Can you explain {finance_term} like I'm new to personal finance?", ("What are the risks I should know about with {finance_term}?",), 14),
    T("e_home", "everyday", "How do I {home_task}?", ("What tools and supplies do I need to {home_task}?",), 18),
    T("e_habit", "everyday", "What are some practical tips for {habit}?", ("How do I keep up {habit} during a busy week?",), 14),
    T("e_social", "everyday", "{social_situation} How should I handle it?", (
        "What exactly should I say? Give me a script for the situation: {social_situation}",
    ), 12),
    T("e_gift", "everyday", "What's a good gift for {gift_for} who likes {hobby}? My budget is {budget}.", ("Suggest something handmade instead for {gift_for}, still related to {hobby}.",), 40),
    T("e_device", "everyday", "My {device_problem[0]} {device_problem[1]}. What should I try?", (), 10),
    T("e_idiom", "everyday", "What does '{idiom}' mean, and where does the expression come from?", ("Use '{idiom}' in three example sentences.",), 20),
    T("e_choice", "everyday", "{choice[0]} or {choice[1]}: which is better for {choice[2]}?", (), 12),
    T("e_pet", "everyday", "I have {pet_q[0]}. {pet_q[1]}", (), 8),
    T("e_plan", "everyday", "Help me plan {plan_event}. What do I need and what's a good timeline?", (), 10),
    # ----------------------------------------------------------------------- added variety
    T("r_persona_topic", "roleplay", "You are {persona}. Explain {simple_topic} to me without breaking character.", (
        "Still as {persona}, answer this: why should I care about {simple_topic}?",
    ), 30),
    T("r_journalist", "roleplay", "I'm a journalist who has travelled back in time to interview you, {figure}. My first question: {figure_q}", (), 16),
    T("h_figure", "humanities", "Why is {figure} considered historically important?", (
        "What is a common myth or misconception about {figure}?",
    ), 16),
    T("h_event_people", "humanities", "How did {event} affect the daily lives of ordinary people?", (), 20),
    T("h_philo_apply", "humanities", "How might {philosophy[0]}'s idea of {philosophy[1]} apply to a modern problem such as social media or climate change?", (), 12),
    T("h_character", "humanities", "Analyze the main character of {book[0]} by {book[1]}. What drives them, and do they change?", (), 16),
]
