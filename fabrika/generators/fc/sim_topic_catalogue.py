"""The offline sim's topic vocabulary: what its topic expander composes topics from and its tool writer reads back.

Data only (the composition lives in :mod:`fabrika.generators.fc.topics_sim`, the tools in
:mod:`fabrika.generators.fc.sim_responders`). A composed topic is one service of one of the
sim world's domains (:data:`fabrika.generators.fc.sim_catalogue.DOMAINS`, whose tools the rest
of the sim knows) for one kind of user in one city, and one need of that user:

    «Ночные поезда в Казани: сравнение цен для студентов»
    "Night trains in Leeds: price comparison for students"

so the space is domains × services × cities × audiences (the need follows from those) — about 190K
Russian and 96K English topics, enough for a pool of tens of thousands without the near-duplicate index
rejecting most of them. Every phrase is written natively in each language (never translated
word for word); each service phrase names its domain (a word of the domain's ``keys``) and no
other domain's keys, and no need, audience or city names any domain's keys
(``tests/topics/test_sim_topic_pool.py`` checks both).

A service, a city and an audience carry a ``slug``: the sim tool writer names a topic's tools
after them (``search_trains_night_kazan_students``), so two topics get the same tools exactly
when they are about the same service for the same users in the same city (the need differs),
and ``fc.tools_dedup`` merges those and keeps every other topic's tools.
"""

from __future__ import annotations

# (ru, en, slug) per service, per domain of the sim catalogue.
SERVICES: dict[str, list[tuple[str, str, str]]] = {
    "trains": [("ночные поезда", "night trains", "night"), ("скоростные поезда", "high-speed trains", "express"),
               ("пригородные поезда", "commuter trains", "commuter"),
               ("поезда дальнего следования", "long-distance trains", "longdistance"),
               ("туристические поезда", "tourist trains", "tourist"),
               ("двухэтажные поезда", "double-decker trains", "doubledecker"),
               ("поезда с купе", "sleeper trains", "sleeper"),
               ("международные поезда", "international trains", "international")],
    "clinic": [("детская поликлиника", "children's clinic", "kids"), ("частная клиника", "private clinic", "private"),
               ("районная поликлиника", "district clinic", "district"),
               ("стоматологическая клиника", "dental clinic", "dental"), ("глазная клиника", "eye clinic", "eye"),
               ("семейный врач", "family doctor", "family"), ("ведомственная поликлиника", "staff clinic", "staff"),
               ("университетская клиника", "university clinic", "university")],
    "delivery": [("доставка продуктов", "grocery delivery", "grocery"),
                 ("доставка с фермерских рынков", "farmers' market delivery", "farm"),
                 ("доставка готовой еды", "ready meal delivery", "meals"),
                 ("доставка из гипермаркета", "hypermarket delivery", "hypermarket"),
                 ("экспресс-доставка продуктов", "express grocery delivery", "express"),
                 ("доставка детского питания", "baby food delivery", "babyfood"),
                 ("доставка здоровой еды", "healthy food delivery", "healthy"),
                 ("ночная доставка продуктов", "late-night grocery delivery", "latenight")],
    "bank": [("зарплатная карта банка", "bank salary card", "salary"),
             ("кредитная карта банка", "bank credit card", "credit"),
             ("студенческая карта банка", "student bank card", "student"),
             ("пенсионная карта банка", "bank pension card", "pension"),
             ("премиальная карта банка", "premium bank card", "premium"),
             ("детская карта банка", "children's bank card", "kids"),
             ("бизнес-карта банка", "business bank card", "business"),
             ("виртуальная карта банка", "virtual bank card", "virtual")],
    "weather": [("прогноз погоды на выходные", "weekend weather forecast", "weekend"),
                ("погода для рыбалки", "fishing weather forecast", "fishing"),
                ("погода в горах", "mountain weather forecast", "mountain"),
                ("морской прогноз погоды", "marine weather forecast", "marine"),
                ("погода для огородников", "garden weather forecast", "garden"),
                ("погода для велосипедистов", "cycling weather forecast", "cycling"),
                ("прогноз погоды в дорогу", "travel weather forecast", "travel"),
                ("штормовые предупреждения и погода", "storm warnings and weather", "storm")],
    "cinema": [("кинотеатр у дома", "local cinema", "local"), ("кинотеатр IMAX", "IMAX cinema", "imax"),
               ("кинотеатр под открытым небом", "open-air cinema", "openair"),
               ("детские киносеансы", "children's film screenings", "kids"),
               ("ночные киносеансы", "late-night film screenings", "latenight"),
               ("фестивальное кино", "festival films", "festival"), ("авторское кино", "art-house films", "arthouse"),
               ("премьеры кино", "film premieres", "premieres")],
    "flights": [("авиарейсы лоукостеров", "budget airline flights", "budget"),
                ("прямые авиарейсы", "direct flights", "direct"), ("чартерные авиарейсы", "charter flights", "charter"),
                ("авиарейсы с пересадкой", "connecting flights", "connecting"),
                ("ночные авиарейсы", "overnight flights", "overnight"),
                ("региональные авиарейсы", "regional flights", "regional"),
                ("международные авиарейсы", "international flights", "international"),
                ("авиарейсы бизнес-класса", "business class flights", "business")],
    "restaurants": [("семейные рестораны", "family restaurants", "family"),
                    ("рестораны с верандой", "restaurants with a terrace", "terrace"),
                    ("панорамные рестораны", "rooftop restaurants", "rooftop"),
                    ("вегетарианские рестораны", "vegetarian restaurants", "vegetarian"),
                    ("рыбные рестораны", "seafood restaurants", "seafood"),
                    ("рестораны высокой кухни", "fine-dining restaurants", "finedining"),
                    ("рестораны при отелях", "hotel restaurants", "hotel"),
                    ("рестораны с живой музыкой", "restaurants with live music", "livemusic")],
    "fitness": [("фитнес-клуб у дома", "local fitness club", "local"),
                ("круглосуточный спортзал", "24-hour gym", "allday"),
                ("йога-студия фитнес-клуба", "fitness club yoga studio", "yoga"),
                ("женский фитнес-клуб", "women's fitness club", "women"),
                ("фитнес-клуб с бассейном", "fitness club with a pool", "pool"),
                ("корпоративный фитнес", "corporate fitness", "corporate"), ("детский фитнес", "kids' fitness", "kids"),
                ("фитнес для начинающих", "beginners' fitness", "beginners")],
    "library": [("городская библиотека", "city library", "city"), ("детская библиотека", "children's library", "kids"),
                ("научная библиотека", "research library", "research"),
                ("электронная библиотека", "digital library", "digital"),
                ("университетская библиотека", "university library", "university"),
                ("сельская библиотека", "village library", "village"),
                ("библиотека редких книг", "rare books library", "rare"),
                ("библиотека иностранной литературы", "foreign literature library", "foreign")],
}

# What the user wants from the service (not part of a tool's identity: a service's tools serve every need). Only
# the need's name goes into a topic: words shared by every topic of a need (an explanation of it) made the
# near-duplicate index fold a third of the pool (bench/RESULTS.md, the 300K section).
NEEDS: dict[str, list[str]] = {
    "ru": ["сравнение цен", "подбор вариантов", "напоминания о сроках", "отмена и возврат денег",
           "уведомления об изменениях", "жалобы и обратная связь", "скидки и бонусы", "семейный доступ",
           "поиск по расписанию", "оплата и чеки", "лимиты и ограничения", "выгрузка отчётов", "проверка статуса",
           "продление подписки", "оценка стоимости", "правила и условия", "срочные вопросы", "настройка профиля",
           "история обращений", "поддержка в выходные"],
    "en": ["price comparison", "option search", "deadline reminders", "cancellations and refunds", "change alerts",
           "complaints and feedback", "discounts and rewards", "family sharing", "schedule search",
           "payments and receipts", "limits and quotas", "report export", "status checks", "subscription renewal",
           "cost estimates", "terms and conditions", "urgent questions", "profile settings", "support history",
           "weekend support"],
}

# (ru, en, slug): whom the service is for.
AUDIENCES: list[tuple[str, str, str]] = [
    ("для студентов", "for students", "students"), ("для пенсионеров", "for pensioners", "pensioners"),
    ("для семей с детьми", "for families with children", "families"), ("для туристов", "for tourists", "tourists"),
    ("для командированных", "for business travellers", "biztravel"),
    ("для людей с инвалидностью", "for disabled people", "accessible"),
    ("для молодых родителей", "for young parents", "parents"), ("для иностранцев", "for foreigners", "foreigners"),
    ("для школьников", "for schoolchildren", "pupils"), ("для владельцев собак", "for dog owners", "dogowners"),
    ("для жителей пригородов", "for suburban residents", "suburbs"), ("для фрилансеров", "for freelancers", "freelancers"),
    ("для малого бизнеса", "for small businesses", "smallbiz"), ("для многодетных семей", "for large families", "largefamilies"),
    ("для спортсменов-любителей", "for amateur athletes", "athletes"), ("для новых клиентов", "for new customers", "newcomers"),
    ("для постоянных клиентов", "for regular customers", "regulars"), ("для пожилых людей", "for older people", "seniors"),
    ("для удалённых сотрудников", "for remote workers", "remote"), ("для волонтёров", "for volunteers", "volunteers"),
    ("для военнослужащих", "for service members", "military"), ("для учителей", "for teachers", "teachers"),
    ("для водителей", "for drivers", "drivers"), ("для молодёжи", "for young people", "youth"),
    ("для беременных", "for expectant mothers", "expecting"), ("для айтишников", "for IT specialists", "it"),
    ("для дачников", "for summer-house owners", "dacha"), ("для владельцев кошек", "for cat owners", "catowners"),
    ("для молодожёнов", "for newlyweds", "newlyweds"), ("для людей на диете", "for people on a diet", "diet"),
    ("для работающих в ночную смену", "for night-shift workers", "nightshift"),
    ("для жителей сёл", "for village residents", "villagers"), ("для инвесторов", "for investors", "investors"),
    ("для художников", "for artists", "artists"), ("для музыкантов", "for musicians", "musicians"),
    ("для экскурсионных групп", "for tour groups", "tourgroups"), ("для выпускников", "for graduates", "graduates"),
    ("для аспирантов", "for postgraduates", "postgrads"), ("для мам в декрете", "for mothers on maternity leave", "maternity"),
    ("для вахтовиков", "for rotation workers", "rotation"),
]

# (name, "in <name>", slug) per language: the Russian locative is written out (pymorphy3 is not needed to read it back).
CITIES: dict[str, list[tuple[str, str, str]]] = {
    "ru": [("Москва", "в Москве", "moscow"), ("Санкт-Петербург", "в Санкт-Петербурге", "spb"),
           ("Казань", "в Казани", "kazan"), ("Самара", "в Самаре", "samara"),
           ("Екатеринбург", "в Екатеринбурге", "ekb"), ("Новосибирск", "в Новосибирске", "novosibirsk"),
           ("Нижний Новгород", "в Нижнем Новгороде", "nnovgorod"), ("Краснодар", "в Краснодаре", "krasnodar"),
           ("Ростов-на-Дону", "в Ростове-на-Дону", "rostov"), ("Уфа", "в Уфе", "ufa"), ("Пермь", "в Перми", "perm"),
           ("Воронеж", "в Воронеже", "voronezh"), ("Волгоград", "в Волгограде", "volgograd"),
           ("Красноярск", "в Красноярске", "krasnoyarsk"), ("Челябинск", "в Челябинске", "chelyabinsk"),
           ("Омск", "в Омске", "omsk"), ("Тюмень", "в Тюмени", "tyumen"), ("Иркутск", "в Иркутске", "irkutsk"),
           ("Хабаровск", "в Хабаровске", "khabarovsk"), ("Владивосток", "во Владивостоке", "vladivostok"),
           ("Ярославль", "в Ярославле", "yaroslavl"), ("Тула", "в Туле", "tula"),
           ("Калининград", "в Калининграде", "kaliningrad"), ("Сочи", "в Сочи", "sochi"), ("Томск", "в Томске", "tomsk"),
           ("Барнаул", "в Барнауле", "barnaul"), ("Ижевск", "в Ижевске", "izhevsk"), ("Саратов", "в Саратове", "saratov"),
           ("Ульяновск", "в Ульяновске", "ulyanovsk"), ("Оренбург", "в Оренбурге", "orenburg"),
           ("Пенза", "в Пензе", "penza"), ("Рязань", "в Рязани", "ryazan"), ("Липецк", "в Липецке", "lipetsk"),
           ("Киров", "в Кирове", "kirov"), ("Чебоксары", "в Чебоксарах", "cheboksary"), ("Калуга", "в Калуге", "kaluga"),
           ("Тверь", "в Твери", "tver"), ("Владимир", "во Владимире", "vladimir"), ("Смоленск", "в Смоленске", "smolensk"),
           ("Курск", "в Курске", "kursk"), ("Белгород", "в Белгороде", "belgorod"),
           ("Архангельск", "в Архангельске", "arkhangelsk"), ("Мурманск", "в Мурманске", "murmansk"),
           ("Петрозаводск", "в Петрозаводске", "petrozavodsk"), ("Сыктывкар", "в Сыктывкаре", "syktyvkar"),
           ("Вологда", "в Вологде", "vologda"), ("Кострома", "в Костроме", "kostroma"), ("Иваново", "в Иванове", "ivanovo"),
           ("Астрахань", "в Астрахани", "astrakhan"), ("Махачкала", "в Махачкале", "makhachkala"),
           ("Ставрополь", "в Ставрополе", "stavropol"), ("Якутск", "в Якутске", "yakutsk"),
           ("Великий Новгород", "в Великом Новгороде", "vnovgorod"), ("Псков", "в Пскове", "pskov"),
           ("Брянск", "в Брянске", "bryansk"), ("Орёл", "в Орле", "orel"), ("Тамбов", "в Тамбове", "tambov"),
           ("Кемерово", "в Кемерове", "kemerovo"), ("Сургут", "в Сургуте", "surgut"),
           ("Новокузнецк", "в Новокузнецке", "novokuznetsk")],
    "en": [(c, f"in {c}", c.lower()) for c in (
        "London", "Leeds", "Bristol", "Manchester", "Glasgow", "Edinburgh", "Cardiff", "Belfast", "Liverpool",
        "Sheffield", "York", "Oxford", "Cambridge", "Brighton", "Norwich", "Boston", "Denver", "Chicago", "Seattle",
        "Austin", "Portland", "Dublin", "Toronto", "Vancouver", "Sydney", "Melbourne", "Auckland", "Phoenix",
        "Atlanta", "Miami")],
}
